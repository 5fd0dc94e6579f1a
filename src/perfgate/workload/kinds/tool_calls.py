"""``tool-calls``: seeded weather questions, each request offering a ``get_weather``
function (``tools``, ``tool_choice`` auto); each answer is judged a valid call or not
(``tool_call_valid_rate``), so a level measures the tool-call path under load, where
engines batch and parse differently."""

from __future__ import annotations

from typing import Any

from perfgate.client.answers import Tool, tool
from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import Draw, PromptKind, register
from perfgate.workload.prompts import Prompt
from perfgate.workload.questions import city_questions

WEATHER: Tool = tool(
    "get_weather",
    "Get the current weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
QUESTION = "What is the weather in {city} right now?"


class ToolCallPrompts(PromptKind):
    """Weather questions, each needing one call of the offered function."""

    names = ("tool-calls",)
    ends_on_its_own = True
    figures = ("tool_call_valid_rate",)

    def request_fields(self, workload: WorkloadSpec) -> dict[str, Any]:
        return {"tools": [WEATHER], "tool_choice": "auto"}

    def one_length(self, workload: WorkloadSpec) -> bool:
        return False  # a call ends when its arguments close

    def lengths(self, workload: WorkloadSpec) -> str:
        return f"weather questions, calls of at most {workload.output_len} tokens"

    def draw(self, draw: Draw) -> list[Prompt]:
        return [Prompt(q, None) for q in city_questions(QUESTION, draw.count, draw.seed)]


register(ToolCallPrompts())
