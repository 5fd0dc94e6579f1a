"""``tool-calls``: seeded weather questions, each request offering a ``get_weather``
function (``tools``, ``tool_choice`` auto); each answer is judged a valid call or not
(``tool_call_valid_rate``), so a level measures the tool-call path under load, where
engines batch and parse differently."""

from __future__ import annotations

from typing import Any

from perfgate.client.answers import Tool, tool
from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import register
from perfgate.workload.questions import CityQuestions

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


class ToolCallPrompts(CityQuestions):
    """Weather questions, each needing one call of the offered function."""

    names = ("tool-calls",)
    question = QUESTION
    answers = "weather questions, calls"
    figures = ("tool_call_valid_rate",)

    def request_fields(self, workload: WorkloadSpec) -> dict[str, Any]:
        return {"tools": [WEATHER], "tool_choice": "auto"}


register(ToolCallPrompts())
