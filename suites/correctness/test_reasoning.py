"""Reasoning: with a reasoning parser, a chat answer carries non-empty reasoning in the
engine's field (``reasoning`` or ``reasoning_content``) and separate non-empty content,
streamed and not. Only for profiles with ``correctness.reasoning = true``."""

import pytest

from perfgate.quality import message_reasoning, reasoning_problems

pytestmark = [pytest.mark.correctness, pytest.mark.perf]
QUESTION = "A farmer has 17 sheep; all but 9 run away. How many are left? Think step by step."


@pytest.fixture
def reasoning_profile(perfgate_session):
    if not perfgate_session.profile.correctness.reasoning:
        pytest.skip("profile runs no reasoning parser (correctness.reasoning = false)")


def test_reasoning_streamed(reasoning_profile, llm):
    record = llm.stream(QUESTION, api="chat", max_tokens=1024, temperature=0)
    assert record.ok, record.error
    assert not reasoning_problems(record.reasoning, record.text), (
        record.reasoning[:200],
        record.text[:200],
    )


def test_reasoning_not_streamed(reasoning_profile, llm):
    body = llm.complete(QUESTION, api="chat", max_tokens=1024, temperature=0)
    message = body["choices"][0]["message"]
    problems = reasoning_problems(message_reasoning(message), message.get("content") or "")
    assert not problems, (problems, message)
