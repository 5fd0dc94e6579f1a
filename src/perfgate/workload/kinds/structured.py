"""``structured``: seeded questions about a city, each request asking for its answer as
JSON valid against a schema (``response_format``); each answer is judged against it
(``schema_valid_rate``), so a level measures the guided-decoding path under load."""

from __future__ import annotations

from typing import Any

from perfgate.client.answers import response_format
from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import register
from perfgate.workload.questions import CityQuestions

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


class StructuredPrompts(CityQuestions):
    """City questions, a JSON Schema answer asked of each."""

    names = ("structured",)
    question = QUESTION
    answers = "city questions, JSON answers"
    figures = ("schema_valid_rate",)

    def request_fields(self, workload: WorkloadSpec) -> dict[str, Any]:
        return {"response_format": response_format("city", CITY_SCHEMA)}


register(StructuredPrompts())
