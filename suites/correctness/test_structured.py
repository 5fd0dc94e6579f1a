"""Structured output (``correctness.structured_output = true``, chat): answers asked for
with ``response_format`` must parse as JSON and validate against the JSON Schema asked
for, streamed and not, and JSON-object mode must give a JSON object. A server that
ignores ``response_format`` (no guided decoding) returns free text, which fails here; a
server that refuses it says why. The share valid must reach
``correctness.structured_min_valid`` (1.0: guided decoding makes every answer valid)."""

import json
from pathlib import Path

import pytest

from perfgate.client.answers import object_problems, response_format, schema_problems

pytestmark = [pytest.mark.correctness, pytest.mark.perf]
DATA = json.loads((Path(__file__).parent / "data" / "structured.json").read_text())
ANSWER_TOKENS = 96  # the schemas bound every string: a valid answer fits


@pytest.fixture
def structured(perfgate_session):
    spec = perfgate_session.profile.correctness
    if not spec.structured_output:
        pytest.skip("profile checks no structured output (correctness.structured_output)")
    if spec.prompt_style != "chat":
        pytest.skip("structured output is checked through chat (response_format)")
    return spec


def asked(asker, prompt: str, fmt: dict, *, stream: bool):
    """The answer to ``prompt`` with ``response_format`` ``fmt``; a refusal or a failed
    stream fails the check saying what the server answered."""
    answer, error = asker.answer_or_error(
        prompt, stream=stream, answer_tokens=ANSWER_TOKENS, temperature=0, response_format=fmt
    )
    if error:
        pytest.fail(
            f"the server refused response_format {fmt['type']!r}: {error} (start it with "
            "structured output / guided decoding on, or set correctness.structured_output "
            "= false)"
        )
    return answer


def test_structured_output_json_schema(structured, asker, perfgate_session):
    """Every schema case, not streamed, and the first streamed: valid against its schema.
    The guided-decoding backend is said where the server names one (vLLM's log)."""
    backend = perfgate_session.run.facts.get("structured_output_backend")
    if backend is not None:
        perfgate_session.notes.say(f"structured output: guided-decoding backend {backend.value}")
    invalid, answers = [], 0
    for i, case in enumerate(DATA["schema_cases"]):
        fmt = response_format(case["name"], case["schema"])
        for stream in (False, True) if i == 0 else (False,):
            answer = asked(asker, case["prompt"], fmt, stream=stream)
            answers += 1
            problems = schema_problems(answer.content, case["schema"])
            if answer.finish_reason == "length" and problems:
                problems.append(f"cut at {ANSWER_TOKENS} tokens (finish_reason length)")
            if problems:
                how = "streamed" if stream else "not streamed"
                invalid.append(f"{case['name']} ({how}): {'; '.join(problems)}")
    valid = 1 - len(invalid) / answers
    assert valid >= structured.structured_min_valid, (
        f"structured output: {valid:.0%} of {answers} answers valid against their JSON Schema "
        f"(minimum {structured.structured_min_valid:.0%}; the server may ignore "
        "response_format):\n" + "\n".join(invalid)
    )


def test_structured_output_json_object(structured, asker):
    for stream in (False, True):
        answer = asked(asker, DATA["object_prompt"], {"type": "json_object"}, stream=stream)
        problems = object_problems(answer.content)
        assert not problems, (
            f"JSON-object mode ({'streamed' if stream else 'not streamed'}): {'; '.join(problems)}"
        )
