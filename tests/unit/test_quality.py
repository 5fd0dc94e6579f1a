"""Degeneracy detectors on real-shaped text, answer checks, code extraction."""

import pytest

from perfgate.correctness.quality import (
    DegeneracyLimits,
    compression_ratio,
    contains_answer,
    distinct_ngram_ratio,
    extract_code,
    garbage_fraction,
    is_degenerate,
    loop_fraction,
)

LIMITS = DegeneracyLimits()


def test_loop_fraction():
    assert loop_fraction("a b c d e f g h") == 0.0
    text = "intro words " + "x y " * 6
    assert loop_fraction(text) == pytest.approx((len(text) - len("intro words")) / len(text))
    assert loop_fraction(". " * 10) == 1.0
    assert loop_fraction("<img>" * 10) == 1.0  # no spaces needed
    assert loop_fraction(", the, the, the, the, the") > 0.8  # cut mid-period still counts


def test_distinct_and_compression():
    assert distinct_ngram_ratio("one two three four five") == 1.0
    assert distinct_ngram_ratio("a b a b a b a b") == pytest.approx(2 / 6)
    assert compression_ratio("abc" * 200) > 10 > compression_ratio("The quick brown fox.")


def test_garbage_fraction():
    assert garbage_fraction("plain text\nwith lines") == 0.0
    assert garbage_fraction("ok\x00\x01\ufffd") == pytest.approx(3 / 5)
    assert garbage_fraction("with<start_of_image><start_of_image>") > 0.8
    assert garbage_fraction("Say hello.<|im_end|>") > 0.3
    assert garbage_fraction("the <em><strong>Times</strong></em>") == 0.0  # HTML is fine


def test_is_degenerate_examples():
    assert is_degenerate("", LIMITS)[0].detector == "chars"
    assert not is_degenerate("Paris.", LIMITS)
    normal = (
        "The weather in spring is mild, with rain in April and long sunny afternoons "
        "in May, when gardens bloom and people spend more time outside."
    )
    assert not is_degenerate(normal, LIMITS)
    looped = "hot. " + ". " * 30
    names = {f.detector for f in is_degenerate(looped, LIMITS)}
    assert {"loop_fraction", "distinct_3grams", "compression_ratio"} <= names


def test_contains_answer_whole_words():
    assert contains_answer(" The capital of France is Paris.", ["paris"])
    assert not contains_answer(" Parisian food", ["Paris"])
    assert contains_answer("4", ["4", "four"])


def test_extract_code_fenced_and_completion():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone") == (
        "def f():\n    return 1\n"
    )
    body = "\n    return n > 1\n\nprint('not part of it')\n"
    assert extract_code(body, prefix="def is_prime(n):") == "def is_prime(n):\n    return n > 1\n"
    cut = "\n    return a + b\n\n\ndef sub(a, b):\n    return a -"
    assert extract_code(cut, prefix="def add(a, b):") == "def add(a, b):\n    return a + b\n"


# Reasoning fields as the engines document them: vLLM `reasoning` (older
# `reasoning_content`), SGLang and llama.cpp `reasoning_content`. No reasoning model
# runs on these machines, so these are fixtures of the documented formats.
VLLM_MESSAGE = {"role": "assistant", "reasoning": "17 - 8 = 9.", "content": "9"}
SGLANG_MESSAGE = {"role": "assistant", "reasoning_content": "All but 9 left.", "content": "9"}
NO_PARSER = {"role": "assistant", "content": "<think>All but 9.</think>9"}


@pytest.mark.parametrize("message", [VLLM_MESSAGE, SGLANG_MESSAGE])
def test_reasoning_in_either_documented_field_passes(message):
    from perfgate.correctness.quality import message_reasoning, reasoning_problems

    assert not reasoning_problems(message_reasoning(message), message["content"])


def test_reasoning_missing_or_leaked_fails():
    from perfgate.correctness.quality import message_reasoning, reasoning_problems

    problems = reasoning_problems(message_reasoning(NO_PARSER), NO_PARSER["content"])
    assert any("no reasoning" in p for p in problems)
    assert any("think tags leaked" in p for p in problems)
    assert reasoning_problems("thinking", "") == ["no content after the reasoning"]
