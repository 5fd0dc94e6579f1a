"""``structured``: seeded questions about a city, each request asking for its answer as
JSON valid against a schema (``response_format``); each answer is judged against it
(``schema_valid_rate``), so a level measures the guided-decoding path under load."""

from __future__ import annotations

from typing import Any

from perfgate.client.answers import response_format
from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import Draw, PromptKind, register
from perfgate.workload.prompts import Prompt
from perfgate.workload.questions import city_questions

CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
    },
    "required": ["city", "country"],
    "additionalProperties": False,
}
QUESTION = "Which country is {city} in? Answer in JSON with the city and its country."


class StructuredPrompts(PromptKind):
    """City questions, a JSON Schema answer asked of each."""

    names = ("structured",)
    ends_on_its_own = True
    figures = ("schema_valid_rate",)

    def request_fields(self, workload: WorkloadSpec) -> dict[str, Any]:
        return {"response_format": response_format("city", CITY_SCHEMA)}

    def one_length(self, workload: WorkloadSpec) -> bool:
        return False  # a JSON answer ends when its object closes

    def lengths(self, workload: WorkloadSpec) -> str:
        return f"city questions, JSON answers of at most {workload.output_len} tokens"

    def draw(self, draw: Draw) -> list[Prompt]:
        return [Prompt(q, None) for q in city_questions(QUESTION, draw.count, draw.seed)]


register(StructuredPrompts())
