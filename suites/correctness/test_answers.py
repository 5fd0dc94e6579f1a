"""Known answers, executable answers, and natural ends.

Known answers: a shipped prompt set with checkable answers (completion prompts for
base models, chat prompts for instruct models); the share right must reach the
profile's ``known_answers_min``. Code tasks: the answer's code runs against test
cases in the sandbox; the share passing must reach ``code_min_pass``.
"""

import json
from pathlib import Path

import pytest

from perfgate.correctness.quality import contains_answer, extract_code
from perfgate.correctness.sandbox import run_sandboxed
from perfgate.errors import SandboxUnavailable

pytestmark = [pytest.mark.correctness, pytest.mark.perf]
DATA = Path(__file__).parent / "data"
KNOWN = json.loads((DATA / "known_answers.json").read_text())
CODE = json.loads((DATA / "code_tasks.json").read_text())


def test_known_answers(asker, perfgate_session):
    """Known answers through the profile's API: a base model's completion up to the stop
    sequence, an instruct model's reply, a reasoning model's content after its thinking."""
    spec = perfgate_session.profile.correctness
    cases = KNOWN[spec.prompt_style]
    wrong = []
    for case in cases:
        answer = asker.ask(
            case["prompt"], answer_tokens=24, temperature=0, stop=case.get("stop", ["\n"])
        )
        text = answer.content if asker.kind == "base" else answer.first_line
        if not contains_answer(text, case["answers"]):
            wrong.append(f"{case['prompt']!r} → {answer.describe()} (expected {case['answers']})")
    right = 1 - len(wrong) / len(cases)
    assert right >= spec.known_answers_min, (
        f"known answers: {right:.0%} right (minimum {spec.known_answers_min:.0%}):\n"
        + "\n".join(wrong)
    )


def test_code_answers_run_in_the_sandbox(asker, perfgate_session):
    """The model's code runs in OS isolation (``perfgate.correctness.sandbox``); where there
    is none, only a profile's ``code_sandbox = 'allow-guard'`` lets the weaker guard run it."""
    spec = perfgate_session.profile.correctness
    if not spec.code_tasks:
        pytest.skip("the profile turns code tasks off (correctness.code_tasks = false)")
    failed = []
    for task in CODE[spec.prompt_style]:
        answer = asker.ask(task["prompt"], answer_tokens=task["max_tokens"], temperature=0)
        prefix = task["prompt"] if spec.prompt_style == "completion" else ""
        try:
            result = run_sandboxed(
                extract_code(answer.content, prefix=prefix),
                task["tests"],
                allow_guard=spec.code_sandbox == "allow-guard",
            )
        except SandboxUnavailable as exc:
            perfgate_session.run.code_sandbox = f"refused: {exc}"
            pytest.fail(str(exc), pytrace=False)
        if perfgate_session.run.code_sandbox != result.isolation:
            perfgate_session.run.code_sandbox = result.isolation
            if not result.isolation.startswith("bubblewrap"):
                perfgate_session.degraded(f"generated code ran under the {result.isolation}")
        if not result.passed:
            why = "timed out" if result.timed_out else result.output.strip()[-200:]
            failed.append(f"{task['name']}: {why}")
    passed = 1 - len(failed) / len(CODE[spec.prompt_style])
    assert passed >= spec.code_min_pass, (
        f"code tasks: {passed:.0%} pass (minimum {spec.code_min_pass:.0%}):\n" + "\n".join(failed)
    )
