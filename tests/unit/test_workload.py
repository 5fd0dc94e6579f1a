"""Prompt building reaches exact token counts against a tokenizer with uneven word costs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.errors import WorkloadError
from perfgate.workload.prompts import PLAN_WORDS, build_prompts, word_costs


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
    costs = word_costs(tok)
    calibration = tok.calls
    assert calibration == 2 * len(PLAN_WORDS) + 1  # once a session
    a = build_prompts(tok, 50, 1000, seed=7, costs=costs)
    assert tok.calls - calibration == 50  # one count a prompt, to check its plan
    b = build_prompts(UnevenTokenizer(), 50, 1000, seed=7)
    c = build_prompts(UnevenTokenizer(), 50, 1000, seed=8)
    assert a == b and a != c
    assert len({p.text for p in a}) == 50
    assert len({p.text.split()[0] + p.text.split()[1] for p in a}) > 1  # prefixes differ


class MergingTokenizer(UnevenTokenizer):
    """Like a tokenizer that merges across words: a word ending in "e" and one starting
    with "t" share a token, so costs counted after "the" do not add up in other company,
    plans miss, and the search takes over."""

    def count(self, text):
        return super().count(text) - text.count("e t")


def test_a_plan_the_server_counts_differently_falls_back_to_searching():
    tok = MergingTokenizer()
    costs = word_costs(tok)
    before = tok.calls
    prompts = build_prompts(tok, 40, 300, seed=3, costs=costs)
    assert tok.calls - before > 2 * 40  # some plans missed and were searched for
    assert all(tok.count(p.text) == 300 == p.tokens for p in prompts)


def test_impossible_length_is_a_clear_error():
    with pytest.raises(WorkloadError, match="exactly 1 tokens"):
        build_prompts(UnevenTokenizer(), 1, 1, seed=0)


def _common_words(texts):
    first = [t.split() for t in texts]
    n = 0
    while all(len(w) > n and w[n] == first[0][n] for w in first):
        n += 1
    return first[0][:n]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 300), st.integers(1, 100), st.integers(0, 2**32))
def test_shared_prefix_prompts_share_exactly_the_prefix_and_keep_the_length(
    input_len, suffix_len, seed
):
    """Every prompt starts with the same words of prefix_len tokens (counted alone) and
    is exactly input_len tokens in all, with a tokenizer whose costs are uneven and one
    whose costs do not add up (the search fallback keeps the prefix)."""
    prefix_len = input_len
    input_len = prefix_len + suffix_len
    for tok in (UnevenTokenizer(), MergingTokenizer()):
        prompts = build_prompts(tok, 6, input_len, seed, prefix_len=prefix_len)
        assert all(tok.count(p.text) == input_len == p.tokens for p in prompts)
        common = _common_words([p.text for p in prompts])
        # the common words are the prefix (or a little more, where suffixes start alike)
        assert tok.count(" ".join(common)) >= prefix_len
        assert len({p.text for p in prompts}) == len(prompts) or suffix_len < 3


def test_shared_prefix_differs_between_seeds_and_random_prompts_share_nothing():
    tok = UnevenTokenizer()
    a = build_prompts(tok, 8, 200, seed=1, prefix_len=150)
    b = build_prompts(tok, 8, 200, seed=2, prefix_len=150)
    assert tok.count(" ".join(_common_words([p.text for p in a]))) >= 150
    assert _common_words([a[0].text, b[0].text]) != _common_words([p.text for p in a])
    random_prompts = build_prompts(tok, 8, 200, seed=1)
    assert tok.count(" ".join(_common_words([p.text for p in random_prompts]))) < 10
