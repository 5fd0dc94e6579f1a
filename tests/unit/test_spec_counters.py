"""Speculative-decoding counters: parsing real llama.cpp and documented vLLM /metrics text."""

import pytest

from perfgate.engines import SpecStats, parse_spec_counters

# captured from llama-server (--metrics, --spec-type draft-simple) on this machine
LLAMACPP = """\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 32
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 24
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 24
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 6
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 6
"""

# vLLM's documented counters (Prometheus adds _total); a fixture, no vLLM GPU here
VLLM = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen"} 1000.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 3000.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 33.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="2"} 0.0
"""


def test_llamacpp_counters():
    c = parse_spec_counters(LLAMACPP, "llamacpp:spec_decode_")
    assert c == SpecStats(
        drafts=6, draft_tokens=24, accepted=24, accepted_per_position=[6, 6, 6, 6]
    )


def test_vllm_counters_and_the_seeds_one_percent():
    c = parse_spec_counters(VLLM, "vllm:spec_decode_")
    stats = c  # the counters are the window's stats (one class: SpecStats)
    assert stats.accept_rate == pytest.approx(0.011)  # "draft acceptance about 1%"
    assert stats.mean_accept_length == pytest.approx(1.033)
    assert stats.per_position_rates == pytest.approx([0.03, 0.003, 0.0])


def test_no_spec_counters_means_none():
    assert (
        parse_spec_counters("llamacpp:tokens_predicted_total 3\n", "llamacpp:spec_decode_") is None
    )


def test_window_is_a_difference_of_lifetime_counters():
    def counters(drafts, draft_tokens, accepted, per_position):
        return SpecStats(
            drafts=drafts, draft_tokens=draft_tokens, accepted=accepted,
            accepted_per_position=per_position,
        )  # fmt: skip

    before = counters(10, 40, 30, [10, 8, 7, 5])
    after = counters(16, 64, 40, [16, 11, 8, 5])
    assert after.minus(before) == counters(6, 24, 10, [6, 3, 1, 0])
