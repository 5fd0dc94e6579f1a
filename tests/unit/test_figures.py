"""The figures a profile can choose to gate (percentiles, request throughput): their
values against numpy's percentiles of the same samples, and the gate judging them."""

from __future__ import annotations

import numpy as np
import pytest

from perfgate.client import RequestRecord
from perfgate.errors import ProfileError
from perfgate.gate.figures import CHOSEN
from perfgate.gate.policy import GatePolicy
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import level_values, run_values
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData, Measurement
from perfgate.profile import Slo, load_profile
from perfgate.render.table import render_table
from perfgate.run.session import PerfgateSession
from perfgate.stats.decide import Rule
from tests.helpers import ROOT

TOKENS = 10


def tailed_run(ttfts: list[float], repeat: int = 0, tpot: float = 0.02) -> LevelData:
    """One run of C=4: a request per TTFT, 10 tokens each, ``tpot`` apart."""
    records = []
    for i, ttft in enumerate(ttfts):
        start = i * 0.01
        times = [start + ttft + k * tpot for k in range(TOKENS)]
        records.append(
            RequestRecord(
                index=i,
                start=start,
                end=times[-1],
                token_times=times,
                completion_tokens=TOKENS,
                finish_reason="length",
            )
        )
    end = max(r.end for r in records)
    return LevelData.from_run(LevelRun(4, records, 0.0, end), repeat)


FAST = [0.10, 0.11, 0.12, 0.10, 0.13, 0.11, 0.12, 0.10, 0.11, 0.12, 0.10, 0.11]


def test_percentile_figures_are_numpys_percentiles_of_the_run_and_req_s_is_ok_per_second():
    ttfts = [*FAST[:9], 0.9, 1.0, 1.1]
    run = tailed_run(ttfts)
    values = level_values("sweep", [run], {f.name for f in CHOSEN})
    ttft = [r.token_times[0] - r.start for r in run.records]
    latency = [r.end - r.start for r in run.records]
    assert values["sweep.c4.ttft_p90_s"] == [pytest.approx(np.percentile(ttft, 90))]
    assert values["sweep.c4.ttft_p99_s"] == [pytest.approx(np.percentile(ttft, 99))]
    assert values["sweep.c4.ttft_s"] == [pytest.approx(np.percentile(ttft, 50))]
    assert values["sweep.c4.latency_p99_s"] == [pytest.approx(np.percentile(latency, 99))]
    assert values["sweep.c4.itl_p50_s"] == [pytest.approx(0.02)]
    assert values["sweep.c4.tpot_p90_s"] == [pytest.approx(0.02)]
    assert values["sweep.c4.req_s"] == [pytest.approx(12 / run.metrics.wall_s)]
    # not chosen: not produced (no "no-baseline" rows for figures nobody asked for)
    assert "sweep.c4.ttft_p99_s" not in level_values("sweep", [run])


def _sweep(runs: list[list[float]]) -> Measurement:
    return Measurement(levels=[tailed_run(t, repeat=i) for i, t in enumerate(runs)])


def test_a_tail_regression_fails_p99_while_the_median_passes():
    """Baseline: 8 runs with no tail. Then a quarter of the requests wait 0.8 s longer:
    the median TTFT passes, its p90 and p99 fail; a figure the profile did not choose
    is not judged."""
    rng = np.random.default_rng(0)
    runs = [list(np.array(FAST) * rng.uniform(0.97, 1.03)) for _ in range(8)]
    chosen = ("ttft_p90_s", "ttft_p99_s")
    values = run_values({"sweep": _sweep(runs)}, chosen)
    base = build_baseline("p", "h", values, None, {}, Rule(3, 10), tolerance=0.3).baseline
    assert {"sweep.c4.ttft_p99_s", "sweep.c4.ttft_p90_s"} <= base.metrics.keys()
    assert "sweep.c4.latency_p99_s" not in base.metrics
    tailed = [[*r[:9], *(t + 0.8 for t in r[9:])] for r in runs[:3]]
    policy = GatePolicy(figures=chosen)
    verdicts = policy.judge({"sweep": _sweep(tailed)}, base, {"sweep": [4]})
    by_key = {c.key: c.verdict for c in verdicts.checks}
    assert by_key["sweep.c4.ttft_s"] == "pass"  # (agg tok/s falls too: the run lasts longer)
    assert by_key["sweep.c4.ttft_p90_s"] == by_key["sweep.c4.ttft_p99_s"] == "regressed"
    # the baseline holds them: judged even when the profile no longer lists them
    held = GatePolicy().judge({"sweep": _sweep(tailed)}, base, {"sweep": [4]})
    held_verdicts = {c.key: c.verdict for c in held.checks}
    assert held_verdicts["sweep.c4.ttft_p99_s"] == "regressed"
    assert held_verdicts["sweep.c4.ttft_s"] == "pass"
    # the same runs without the tail pass every figure
    clean = policy.judge({"sweep": _sweep(runs[3:6])}, base, {"sweep": [4]})
    assert not clean.failed
    table = render_table("sweep", _sweep(tailed), base, policy.chosen(base))
    assert "TTFT p90(s)" in table and "TTFT p99(s)" in table


def test_an_unknown_chosen_figure_is_a_profile_error_naming_the_choices(tmp_path):
    profile = load_profile("llamacpp-gemma3-270m", ROOT / "profiles")
    gate = profile.gate.model_copy(update={"figures": ["ttft_p95_s"]})
    profile = profile.model_copy(update={"gate": gate})
    with pytest.raises(ProfileError, match=r"unknown ttft_p95_s.*ttft_p99_s"):
        PerfgateSession(profile, root=ROOT, baselines_dir=tmp_path / "b", output_dir=tmp_path / "o")


def test_goodput_counts_the_requests_that_met_every_service_level():
    """12 requests, 10 tokens each, TPOT 20 ms: three with a slow first token, and one
    more whose tokens come 100 ms apart; a TTFT level of 0.5 s misses the three, a TPOT
    level of 50 ms the fourth; a failed request never meets them."""
    ttfts = [*FAST[:9], 0.9, 1.0, 1.1]
    run = tailed_run(ttfts).records
    slow_tokens = run[0]
    slow_tokens.token_times = [slow_tokens.token_times[0] + k * 0.1 for k in range(TOKENS)]
    slow_tokens.end = slow_tokens.token_times[-1]
    failed = RequestRecord(index=12, start=0.0, end=0.2, error="HTTP 500")
    level = LevelRun(4, [*run, failed], 0.0, max(r.end for r in run))
    data = LevelData.from_run(level, slo=Slo(ttft_s=0.5, tpot_s=0.05))
    assert data.goodput is not None
    assert (data.goodput.requests, data.goodput.met) == (13, 8)
    values = level_values("sweep", [data], {"slo_met", "goodput_tok_s"})
    assert values["sweep.c4.slo_met"] == [pytest.approx(8 / 13)]
    assert values["sweep.c4.goodput_tok_s"] == [pytest.approx(8 * TOKENS / level.wall_s)]
    only_latency = LevelData.from_run(level, slo=Slo(latency_s=0.4))
    # the 8 fast ones end within 0.31 s; the slow-token one lasts 1 s, the late ones 1.1 s+
    assert only_latency.goodput.met == 8
    assert LevelData.from_run(level).goodput is None  # no service levels: no figure
    with pytest.raises(ValueError, match="at least one of ttft_s"):
        Slo()


def _judged_sweep(tmp_path, runs: list[list[float]], *, update: bool) -> PerfgateSession:
    """A real session of the embedded default (its sweep at C=4 only) whose sweep ran
    ``runs`` (TTFTs of each run), judged against ``tmp_path``'s baselines (key ``hw``),
    finished as passed or failed by its verdicts."""
    profile = load_profile("llamacpp-gemma3-270m", ROOT / "profiles")
    workload = profile.workload.model_copy(update={"levels": [4]})
    perf = PerfgateSession(
        profile.model_copy(update={"workload": workload}),
        root=ROOT,
        baselines_dir=tmp_path / "b",
        output_dir=tmp_path / "o",
        update_baselines=update,
        progress=lambda _: None,
    )
    perf.resolve_baseline({"key": "hw"})
    perf.run.measurements = {"sweep": _sweep(runs)}
    perf.run.checks = perf.verdicts().checks
    perf.finish("failed" if any(c.failed for c in perf.run.checks) else "passed")
    return perf


def test_recording_over_a_baseline_refuses_a_regressed_run_and_says_how_to_accept_it(tmp_path):
    """--perf-update-baselines over an exact baseline: a run whose TTFT doubled is judged against
    it (really regressed), nothing is written, and the refusal names the figure, the file,
    and how to accept slower figures on purpose."""

    def recording(runs: list[list[float]]) -> PerfgateSession:
        return _judged_sweep(tmp_path, runs, update=True)

    first = recording([FAST] * 3)
    assert any("written" in line or "added" in line for line in first.record_baseline())
    written = first.baseline_path.read_bytes()
    slow = recording([[2 * t for t in FAST]] * 3)
    assert "sweep.c4.ttft_s" in [c.key for c in slow.run.checks if c.verdict == "regressed"]
    lines = slow.record_baseline()
    assert lines[0].startswith("perfgate: baseline NOT updated: the run failed")
    hint = next(line for line in lines if "regressed against" in line)
    assert "b/llamacpp-gemma3-270m/hw.json" in hint and "sweep.c4.ttft_s" in hint
    assert "remove that file" in hint
    assert first.baseline_path.read_bytes() == written


def test_a_figure_past_its_limit_within_noise_fails_as_too_noisy(tmp_path):
    """CI (a host in contention): p99 TTFT at 2.4x its baseline in every one of 8 runs,
    their spread so wide that the old gate could not tell it from noise, and the summary
    said "all within tolerance". A figure past its limit that noise keeps from a verdict
    now fails as TOO NOISY, named in red; a steady run keeps the green line."""
    from perfgate.plugin.terminal import _summary_lines

    def session(runs: list[list[float]], update: bool) -> PerfgateSession:
        return _judged_sweep(tmp_path, runs, update=update)

    recorded = session([FAST] * 8, update=True)
    recorded.record_baseline()
    steady = session([FAST] * 3, update=False)
    green = "all 3 baseline figures judged, all within tolerance (exact baseline: "
    assert any(c == "green" and line.startswith(green) for c, line in _summary_lines(steady))
    noisy = session([[f * t for t in FAST] for f in (0.5, 3.0, 0.5, 3.0, 3.0, 0.5)], False)
    past = [c for c in noisy.run.checks if c.past_limit]
    assert past and all(c.verdict == "too-noisy" for c in past), [c.message() for c in past]
    assert noisy.run.status == "failed"
    lines = _summary_lines(noisy)
    assert not any("all within tolerance" in line for _, line in lines), lines
    head = next(i for i, (_, line) in enumerate(lines) if line.startswith("TOO NOISY"))
    assert lines[head][0] == "red"
    noisy_checks = [c for c in noisy.run.checks if c.verdict == "too-noisy"]
    shown = {line.strip() for _, line in lines[head + 1 : head + 1 + len(noisy_checks)]}
    assert shown == {c.message() for c in noisy_checks} >= {c.message() for c in past}
    assert all("TOO NOISY (too noisy to decide after 6 runs" in c.message() for c in past)
