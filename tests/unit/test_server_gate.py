"""The server's own figures through the gate and the diagnosis: a profile that chooses them
records and judges them like any figure (counts from a baseline of 0 included), the
table shows them, and the diagnosis ranks what they say against the baseline's."""

from __future__ import annotations

import pytest

from perfgate.diagnose.causes import likely_causes
from perfgate.diagnose.server import server_facts
from perfgate.gate.policy import GatePolicy
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import run_values
from perfgate.measure.data import LevelData, Measurement
from perfgate.measure.server import ServerSeries
from perfgate.render.table import render_table
from perfgate.stats.decide import Rule
from tests.synthetic import level_run

NOISY = [100.0, 97.0, 103.0, 99.0, 101.0, 98.0, 102.0, 100.5]
SERVER_FIGURES = (
    "server_waiting_mean",
    "server_waiting_peak",
    "server_kv_peak",
    "server_preemptions",
    "server_prefix_hit_rate",
    "server_tok_s",
)


def series(
    *,
    waiting: list[float],
    running: list[float],
    kv: list[float],
    preempted: float = 0.0,
    hits: float = 870.0,
    generated: float = 640.0,
) -> ServerSeries:
    """A level's server series: gauges per sample, counters at both ends (vLLM's names)."""
    n = len(waiting)
    return ServerSeries(
        interval_s=0.5,
        t_ms=[500 * i for i in range(n)],
        gauges={"waiting": list(waiting), "running": list(running), "kv_usage": list(kv)},
        before={"preemptions": 10.0, "prefix_hits": 0.0, "prefix_queries": 0.0,
                "server_generated_tokens": 0.0},
        after={"preemptions": 10.0 + preempted, "prefix_hits": hits, "prefix_queries": 1000.0,
               "server_generated_tokens": generated},
        span_s=2.0,
        sources={"waiting": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
                 "kv_usage": "vllm:kv_cache_usage_perc",
                 "preemptions": "vllm:num_preemptions_total",
                 "prefix_hits": "vllm:prefix_cache_hits_total"},
    )  # fmt: skip


HEALTHY = {"waiting": [0, 0, 0, 0], "running": [4, 4, 4, 4], "kv": [0.2, 0.3, 0.35, 0.3]}
# fewer slots, a KV cache too small and the prefix cache gone: the regressions
STARVED = {"waiting": [2, 3, 3, 2], "running": [1, 1, 1, 1], "kv": [0.9, 1.0, 1.0, 1.0]}


def run_with(tok_s: float, repeat: int, state: dict, **counters: float) -> LevelData:
    run = level_run(4, tok_s, repeat=repeat)
    return run.model_copy(update={"server": series(**state, **counters)})


def measured(values: list[float], state: dict, **counters: float) -> dict[str, Measurement]:
    m = Measurement(levels=[run_with(v, i, state, **counters) for i, v in enumerate(values)])
    return {"sweep": m}


def recorded():
    runs = measured(NOISY, HEALTHY)
    values = run_values(runs, SERVER_FIGURES)
    return build_baseline("p", "h", values, None, {}, Rule(3, 10)).baseline


def test_counts_at_0_are_recorded_and_gated_as_count_plus_one():
    base = recorded()
    preempted = base.metrics["sweep.c4.server_preemptions"]
    waiting = base.metrics["sweep.c4.server_waiting_mean"]
    assert preempted.value == 0.0 and waiting.value == 0.0  # kept, not left out as 0
    assert base.metrics["sweep.c4.server_prefix_hit_rate"].value == pytest.approx(0.87)
    policy = GatePolicy(figures=SERVER_FIGURES)
    healthy = policy.judge(measured(NOISY[:3], HEALTHY), base, {"sweep": [4]})
    assert not healthy.failed, [c.message() for c in healthy.failed]
    starved = measured(NOISY[:3], STARVED, preempted=340.0, hits=0.0)
    verdicts = {c.key: c for c in policy.judge(starved, base, {"sweep": [4]}).checks}
    for key in (
        "sweep.c4.server_preemptions",
        "sweep.c4.server_waiting_mean",
        "sweep.c4.server_waiting_peak",
        "sweep.c4.server_kv_peak",
        "sweep.c4.server_prefix_hit_rate",
    ):
        assert verdicts[key].verdict == "regressed", verdicts[key].message()
    check = verdicts["sweep.c4.server_preemptions"]
    assert check.measured == 340.0 and check.baseline == 0.0  # counts shown, not count + 1
    assert check.limit is not None and 0.0 < check.limit < 1.0
    assert "measured 340 requests" in check.message() and "baseline 0 requests" in check.message()
    assert verdicts["sweep.c4.server_tok_s"].verdict == "pass"  # the same tokens counted


def test_the_server_table_shows_each_levels_own_metrics():
    runs = measured(NOISY[:3], STARVED, preempted=340.0, hits=0.0)
    table = render_table("sweep", runs["sweep"], None)
    assert "the server's own metrics:" in table
    header, _, row = table.split("the server's own metrics:\n")[1].splitlines()[:3]
    assert "Queue mean" in header and "Preempted" in header and "Prefix hit%" in header
    cells = [c.strip() for c in row.split("|")]
    assert cells[0] == "4" and cells[1] == "2.5" and cells[2] == "3" and cells[3] == "1"
    assert cells[4] == "100.0" and cells[5] == "340" and cells[6] == "0.0"
    assert cells[8] == "1920/120"  # the server's 640 a run against the client's 4 x 10 tokens


def facts_of(state: dict, **counters: float):
    return server_facts(measured(NOISY[:3], state, **counters))


def test_the_diagnosis_names_preemptions_the_queue_the_prefix_cache_and_a_full_kv_cache():
    old = facts_of(HEALTHY)
    new = facts_of(STARVED, preempted=340.0, hits=0.0)
    assert new["server.sweep.c4.preemptions"].value == 340.0
    assert "vllm:num_preemptions_total" in (new["server.sweep.c4.preemptions"].evidence or "")
    texts = [c.text for c in likely_causes(new, old)]
    assert any(
        t.startswith("preemptions 340 at sweep C=4 (baseline 0): the KV cache is too small")
        for t in texts
    ), texts
    assert any(t.startswith("prefix-cache hit rate 0% at sweep C=4 (baseline 87%)") for t in texts)
    queue = next(t for t in texts if t.startswith("waiting up to 3 (mean 2.5)"))
    assert "running at most 1 at sweep C=4" in queue and "(baseline: waiting up to 0" in queue
    assert any(t.startswith("KV cache 100% full from sweep C=4 on (baseline 35%)") for t in texts)
    # the healthy run against itself: nothing to say
    assert likely_causes(old, old) == []


def test_without_a_baseline_only_what_is_wrong_on_its_own_is_named():
    new = facts_of(STARVED, preempted=340.0, hits=0.0)
    texts = [c.text for c in likely_causes(new, {})]
    assert any(t.startswith("preemptions 340 at sweep C=4: the KV cache") for t in texts)
    assert any(t.startswith("waiting up to 3") for t in texts)
    assert not any("prefix-cache" in t for t in texts)  # 0% may be this workload's own


def test_a_baseline_value_of_0_is_refused_for_any_figure_but_a_count():
    from perfgate.gate.baseline import Baseline

    def baseline(key: str) -> dict:
        exp = {"value": 0.0, "tolerance": 0.1, "direction": "higher", "unit": "tok/s"}
        return {"schema_version": 2, "profile": "p", "hardware": "h", "metrics": {key: exp}}

    with pytest.raises(ValueError, match=r"sweep\.c4\.agg_tok_s: value 0 has no place"):
        Baseline.model_validate(baseline("sweep.c4.agg_tok_s"))
    Baseline.model_validate(baseline("sweep.c4.server_preemptions"))


def test_a_queue_behind_the_configured_slots_names_them():
    from perfgate.facts import Fact

    slots = {"waiting": [0, 4, 4, 2], "running": [2, 2, 2, 2], "kv": [0.1, 0.2, 0.2, 0.2]}
    new = facts_of(slots) | {"arg.max_num_seqs": Fact(value=2, source="log")}
    texts = [c.text for c in likely_causes(new, facts_of(HEALTHY))]
    queue = next(t for t in texts if t.startswith("waiting up to 4"))
    assert "every slot busy (--max-num-seqs 2 for 4 requests in flight)" in queue, queue
    unknown = [c.text for c in likely_causes(facts_of(slots), facts_of(HEALTHY))]
    assert any("fewer slots (-np, --max-num-seqs" in t for t in unknown), unknown
