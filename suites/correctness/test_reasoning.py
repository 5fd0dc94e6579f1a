"""Reasoning: with a reasoning parser, a chat answer carries non-empty reasoning in the
engine's field (``reasoning`` or ``reasoning_content``) and separate non-empty content, no
think tag left in either, streamed and not; the share of the reasoning budget spent
thinking is said. Only for profiles with ``correctness.reasoning = true``; the model may
think for ``correctness.reasoning_budget`` tokens before it answers."""

import pytest

from perfgate.correctness.quality import reasoning_problems, thinking_share

pytestmark = [pytest.mark.correctness, pytest.mark.perf]
QUESTION = "A farmer has 17 sheep; all but 9 run away. How many are left? Think step by step."
ANSWER_TOKENS = 256


@pytest.fixture
def reasoning_profile(perfgate_session):
    if not perfgate_session.profile.correctness.reasoning:
        pytest.skip("profile runs no reasoning parser (correctness.reasoning = false)")


def check(answer, budget):
    """The problems with a reasoning answer, as one message ('' when fine)."""
    problems = reasoning_problems(answer.reasoning, answer.content)
    if not answer.content.strip() and answer.finish_reason == "length":
        problems.append(
            f"the model was still thinking after {budget} tokens (finish_reason length): "
            "raise correctness.reasoning_budget"
        )
    if not problems:
        return ""
    return f"{'; '.join(problems)}: {answer.reasoning[:200]!r} | {answer.content[:200]!r}"


def test_reasoning_streamed(reasoning_profile, asker, perfgate_session):
    answer = asker.stream(QUESTION, answer_tokens=ANSWER_TOKENS, temperature=0)
    assert answer.error is None, answer.error
    budget = perfgate_session.profile.correctness.reasoning_budget
    perfgate_session.notes.say(f"reasoning: {thinking_share(answer.reasoning_tokens, budget)}")
    problems = check(answer, asker.budget(ANSWER_TOKENS))
    assert not problems, problems


def test_reasoning_not_streamed(reasoning_profile, asker):
    answer = asker.ask(QUESTION, answer_tokens=ANSWER_TOKENS, temperature=0)
    problems = check(answer, asker.budget(ANSWER_TOKENS))
    assert not problems, problems
