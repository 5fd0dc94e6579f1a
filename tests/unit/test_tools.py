"""The tool-call check's rules (calls and contents written here, in the shapes the API
and the engines' parsers give: they show the rules read them, not what an engine
returns)."""

from __future__ import annotations

import pytest

from perfgate.client.answers import call_problems, leaked_call, same_calls, tool

WEATHER = tool(
    "get_weather",
    "The current weather in a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
TOOLS = [WEATHER]


def test_a_valid_call_has_no_problem():
    call = {"id": "c0", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert call_problems(call, TOOLS) == []


@pytest.mark.parametrize(
    ("arguments", "name", "named"),
    [
        ('{"city": "Paris"}', "get_wether", "calls 'get_wether', which was not offered"),
        ('{"city": "Par', "get_weather", "arguments are not JSON"),
        ('["Paris"]', "get_weather", "arguments are not a JSON object"),
        ("{}", "get_weather", "'city' is a required property"),
        ('{"city": 7}', "get_weather", "at city: 7 is not of type 'string'"),
        ('{"city": "Paris", "unit": "C"}', "get_weather", "Additional properties"),
    ],
)
def test_each_way_a_call_is_wrong_is_named(arguments, name, named):
    problems = call_problems({"id": "", "name": name, "arguments": arguments}, TOOLS)
    assert problems and named in "; ".join(problems), problems


@pytest.mark.parametrize(
    "content",
    [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',  # llama3_json's shape
        '[get_weather(city="Paris")]',  # pythonic
        '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
    ],
)
def test_call_text_left_in_the_content_is_found(content):
    assert leaked_call(content, TOOLS)


def test_an_answer_that_names_the_city_is_no_leak():
    assert leaked_call("It is 17 degrees and sunny in Paris.", TOOLS) is None


def test_streamed_and_not_compare_by_function_and_arguments_not_ids_or_spacing():
    one = [{"id": "a", "name": "get_weather", "arguments": '{"city": "Paris"}'}]
    other = [{"id": "b", "name": "get_weather", "arguments": '{"city":"Paris"}'}]
    assert same_calls(one, other)
    assert not same_calls(one, [{**other[0], "arguments": '{"city": "Rome"}'}])
    assert not same_calls(one, None)
