"""Prompt building reaches exact token counts against a tokenizer with uneven word costs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.errors import WorkloadError
from perfgate.workload import build_prompts


class UnevenTokenizer:
    """BOS + one token per short word, two per long word, one per separator-free pad."""

    def __init__(self):
        self.calls = 0

    def count(self, text):
        self.calls += 1
        return 1 + sum(1 if len(w) <= 6 else 2 for w in text.split())


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 400), st.integers(0, 2**32))
def test_exact_length_for_any_target(input_len, seed):
    tok = UnevenTokenizer()
    [prompt] = build_prompts(tok, 1, input_len, seed)
    assert tok.count(prompt.text) == input_len == prompt.tokens


def test_seeded_distinct_and_cheap():
    tok = UnevenTokenizer()
    a = build_prompts(tok, 8, 100, seed=7)
    calls_per_prompt = tok.calls / 8
    b = build_prompts(UnevenTokenizer(), 8, 100, seed=7)
    c = build_prompts(UnevenTokenizer(), 8, 100, seed=8)
    assert a == b and a != c
    assert len({p.text for p in a}) == 8
    assert len({p.text.split()[0] + p.text.split()[1] for p in a}) > 1  # prefixes differ
    assert calls_per_prompt < 12


def test_impossible_length_is_a_clear_error():
    with pytest.raises(WorkloadError, match="exactly 1 tokens"):
        build_prompts(UnevenTokenizer(), 1, 1, seed=0)
