"""Tool calls (``correctness.tool_calls = true``, chat): the server is offered functions with
JSON Schema parameters. A prompt that needs a call gets one back parsed: finish_reason
``tool_calls``, an offered name, arguments that parse and validate against its schema, no
call text left in ``content``, the same call streamed and not. A follow-up turn carrying
the tool's result gets an answer that uses it. With ``tool_choice = "auto"`` a prompt
that needs no call gets none; with ``parallel_tool_calls = true`` a prompt that needs two
gets two. A server without tool-call parsing returns the call as plain text (or refuses
the request), and the check says how to start it."""

import json

import pytest

from perfgate.client.answers import call_problems, leaked_call, same_calls
from perfgate.workload.kinds.tool_calls import WEATHER  # the tool-calls workload's own

pytestmark = [pytest.mark.correctness, pytest.mark.perf]
ANSWER_TOKENS = 128
TOOLS = [WEATHER]
ONE_CALL = "What is the weather in Paris right now?"
TWO_CALLS = "What is the weather right now in Paris, and in Rome?"
NO_CALL = "Say hello to me in one short sentence."
RESULT = {"city": "Paris", "temperature_c": 17, "sky": "sunny"}


@pytest.fixture
def tools_spec(perfgate_session):
    spec = perfgate_session.profile.correctness
    if not spec.tool_calls:
        pytest.skip("profile checks no tool calls (correctness.tool_calls = false)")
    if spec.prompt_style != "chat":
        pytest.skip("tool calls are checked through chat")
    return spec


@pytest.fixture
def setup(perfgate_session) -> str:
    """How to start this engine so that calls come back parsed."""
    return perfgate_session.engine.tool_call_setup


def asked(asker, prompt: str, setup: str, *, stream: bool, **params):
    """The answer with ``tools`` offered; a refusal or a failed stream fails the check,
    saying what the server answered and how to start it."""
    answer, error = asker.answer_or_error(
        prompt, stream=stream, answer_tokens=ANSWER_TOKENS, temperature=0, tools=TOOLS, **params
    )
    if error:
        pytest.fail(f"the server refused a request offering tools: {error} ({setup})")
    return answer


def call_answer_problems(answer, setup: str, calls: int = 1) -> list[str]:
    """What is wrong with an answer that should carry ``calls`` calls."""
    if not answer.tool_calls:
        leak = leaked_call(answer.content, TOOLS)
        if leak:
            return [f"the call came back as plain text in content ({leak!r}); {setup}"]
        return [
            f"no tool call (finish_reason {answer.finish_reason!r}, content "
            f"{answer.content[:160]!r}); {setup}"
        ]
    problems = [p for call in answer.tool_calls for p in call_problems(call, TOOLS)]
    if len(answer.tool_calls) != calls:
        problems.append(f"{len(answer.tool_calls)} calls, expected {calls}")
    if answer.finish_reason != "tool_calls":
        problems.append(f"finish_reason {answer.finish_reason!r}, expected 'tool_calls'")
    if leak := leaked_call(answer.content, TOOLS):
        problems.append(f"call text left in content too ({leak!r})")
    return problems


def test_tool_call(tools_spec, asker, setup):
    """One call, not streamed and streamed: parsed, valid, and the same both ways."""
    answers = {
        how: asked(asker, ONE_CALL, setup, stream=stream, tool_choice=tools_spec.tool_choice)
        for how, stream in (("not streamed", False), ("streamed", True))
    }
    problems = [
        f"{how}: {problem}"
        for how, answer in answers.items()
        for problem in call_answer_problems(answer, setup)
    ]
    assert not problems, "tool call: " + "; ".join(problems)
    plain, streamed = answers["not streamed"], answers["streamed"]
    assert same_calls(plain.tool_calls, streamed.tool_calls), (
        f"streamed and non-streamed calls differ: {plain.tool_calls} against "
        f"{streamed.tool_calls} (greedy decoding)"
    )


def test_tool_result_is_used(tools_spec, asker, setup):
    """The tool's result sent back (a ``tool`` message after the assistant's call): the
    answer uses it (its temperature)."""
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    messages = [
        {"role": "user", "content": ONE_CALL},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(RESULT)},
    ]
    answer = asked(asker, ONE_CALL, setup, stream=False, messages=messages, tool_choice="none")
    text = answer.content
    assert str(RESULT["temperature_c"]) in text, (
        f"the answer after the tool's result {json.dumps(RESULT)} does not use it: "
        f"{text[:200]!r} (finish_reason {answer.finish_reason!r}; a chat template that drops "
        "tool messages?)"
    )


def test_no_tool_call_when_none_is_needed(tools_spec, asker, setup):
    if tools_spec.tool_choice != "auto":
        pytest.skip("tool_choice = 'required' forces a call: no prompt can need none")
    answer = asked(asker, NO_CALL, setup, stream=False, tool_choice="auto")
    assert not answer.tool_calls, f"a call where none was needed: {answer.tool_calls}"
    assert answer.content.strip() and not leaked_call(answer.content, TOOLS), answer.content


def test_parallel_tool_calls(tools_spec, asker, setup):
    if not tools_spec.parallel_tool_calls:
        pytest.skip("profile asks for no parallel calls (correctness.parallel_tool_calls)")
    answer = asked(
        asker,
        TWO_CALLS,
        setup,
        stream=False,
        tool_choice=tools_spec.tool_choice,
        parallel_tool_calls=True,
    )
    problems = call_answer_problems(answer, setup, calls=2)
    assert not problems, "parallel tool calls: " + "; ".join(problems)
