"""The gate policy on synthetic runs: abort, measure again, judge every figure, record."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.gate.policy import GatePolicy, choose_baseline
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import run_values
from perfgate.measure.data import Measurement
from perfgate.stats.decide import Rule
from tests.synthetic import level_run, measurement

PLANNED = {"single": [1], "sweep": [1, 2, 4]}
NOISY = [100.0, 97.0, 103.0, 99.0, 101.0, 98.0, 102.0, 100.5]


def recorded(accept=None):
    """A baseline recorded from 8 runs of each level (about 2% noise)."""
    runs = {
        "single": measurement({1: NOISY}, accept=accept),
        "sweep": measurement({c: NOISY for c in (1, 2, 4)}, accept=accept),
    }
    return build_baseline("p", "h", run_values(runs), None, {}, Rule(3, 10)).baseline


def test_every_baseline_figure_is_judged_and_absent_ones_are_missing():
    base = recorded(accept=0.8)
    policy = GatePolicy()
    # speculation counters gone, C=4 not run, the single measurement deselected
    sweep = measurement({1: NOISY[:3], 2: NOISY[:3]})
    sweep.not_run = [4]
    verdicts = policy.judge({"sweep": sweep}, base, PLANNED)
    missing = {c.key: c.why for c in verdicts.of("missing")}
    assert "sweep.c1.accept_rate" in missing and "speculative" in missing["sweep.c1.accept_rate"]
    assert "did not run" in missing["sweep.c4.agg_tok_s"]
    assert "deselected" in missing["single.c1.per_request_tok_s"]
    assert verdicts.failed and all(c.verdict == "pass" for c in verdicts.judged)
    assert "MISSING" in verdicts.of("missing")[0].message()


def test_a_level_dropped_from_the_profile_is_missing_until_retired():
    base = recorded()
    sweep = measurement({1: NOISY[:3], 2: NOISY[:3]})
    runs = {"single": measurement({1: NOISY[:3]}), "sweep": sweep}
    planned = {"single": [1], "sweep": [1, 2]}
    why = {c.key: c.why for c in GatePolicy().judge(runs, base, planned).of("missing")}
    assert "not one of the profile's sweep levels" in why["sweep.c4.agg_tok_s"]
    retired = GatePolicy(retired=("sweep.c4.*",)).judge(runs, base, planned)
    assert not retired.failed and "sweep.c4.ttft_s" in retired.retired


def test_a_halved_server_regresses():
    base = recorded()
    slow = [v / 2 for v in NOISY[:3]]
    runs = {"single": measurement({1: slow}), "sweep": measurement({c: slow for c in (1, 2, 4)})}
    verdicts = GatePolicy().judge(runs, base, PLANNED)
    assert {c.key for c in verdicts.of("regressed")} >= {
        "single.c1.per_request_tok_s",
        "sweep.c4.agg_tok_s",
    }


def test_early_abort_needs_the_figure_far_below_and_beyond_noise():
    base = recorded()
    policy = GatePolicy(abort_below=0.5)
    assert policy.abort_reason("sweep", level_run(1, 40.0), base).startswith(
        "early abort at C=1: sweep.c1.agg_tok_s"
    )
    assert policy.abort_reason("sweep", level_run(1, 90.0), base) is None
    assert (
        GatePolicy(abort_below=0.5, recording=True).abort_reason("sweep", level_run(1, 40.0), base)
        is None
    )
    # a baseline whose runs vary by a factor of 3: half the baseline is within its noise
    wild = build_baseline(
        "p", "h", run_values({"sweep": measurement({1: [40.0, 100.0, 150.0]})}), None, {},
        Rule(3, 10),
    ).baseline  # fmt: skip
    assert policy.abort_reason("sweep", level_run(1, 45.0), wild) is None


def test_levels_are_measured_again_only_while_near_the_limit():
    base = recorded()
    policy = GatePolicy(min_runs=3, max_runs=6, early_runs=3)  # no early look
    runs = [level_run(1, v, repeat=i) for i, v in enumerate(NOISY[:2])]
    assert policy.after_level("sweep", runs, base) == "repeat"  # below the minimum
    runs.append(level_run(1, 100.0, repeat=2))
    assert policy.after_level("sweep", runs, base) == "next"  # clearly within
    tol = base.metrics["sweep.c1.per_request_tok_s"].tolerance
    edge = 100.0 * (1 - tol)
    near = [level_run(1, edge * f, repeat=i) for i, f in enumerate((0.99, 1.01, 1.0))]
    assert policy.after_level("sweep", near, base) == "repeat"
    near += [level_run(1, edge, repeat=i) for i in range(3, 6)]
    assert policy.after_level("sweep", near, base) == "next"  # the most runs allowed


def test_only_a_passed_complete_run_of_enough_runs_may_be_recorded():
    policy = GatePolicy(recording=True)
    full = {"sweep": measurement({1: NOISY[:3]})}
    assert policy.recording_problems(full, status="passed", correctness_failures=[]) == []
    assert (
        "interrupted"
        in policy.recording_problems(full, status="interrupted", correctness_failures=[])[0]
    )
    short = {"sweep": measurement({1: NOISY[:2]})}
    assert (
        "at least 3"
        in policy.recording_problems(short, status="passed", correctness_failures=[])[0]
    )
    aborted = {"sweep": measurement({1: NOISY[:3]})}
    aborted["sweep"].not_run = [2, 4]
    assert (
        "levels not run"
        in policy.recording_problems(aborted, status="passed", correctness_failures=[])[0]
    )
    failing = {"sweep": measurement({1: NOISY[:3]}, fail=1)}
    assert "requests failed" in " ".join(
        policy.recording_problems(failing, status="passed", correctness_failures=[])
    )
    assert policy.recording_problems({}, status="passed", correctness_failures=["t::x"])


def test_recording_merges_keeps_unmeasured_figures_and_derives_tolerances():
    base = recorded()
    only_sweep = run_values({"sweep": measurement({1: [v * 1.1 for v in NOISY]})})
    again = build_baseline("p", "h", only_sweep, base, {}, Rule(3, 10))
    assert "single.c1.per_request_tok_s" in again.kept
    assert (
        again.baseline.metrics["single.c1.per_request_tok_s"]
        == base.metrics["single.c1.per_request_tok_s"]
    )
    exp = again.baseline.metrics["sweep.c1.agg_tok_s"]
    assert exp.tolerance_source == "derived" and exp.runs == 8 and exp.noise_sigma
    assert exp.value == (100.0 * 1.1 + 100.5 * 1.1) / 2  # the median of the 8 runs


def test_scaling_is_each_runs_aggregate_over_the_c1_median():
    from perfgate.gate.values import measurement_values

    # level_run(c, tok_s): aggregate = c x tok_s
    m = measurement({1: [100.0, 80.0, 110.0], 4: [50.0, 40.0]})
    values = measurement_values("sweep", m)
    # run i of C=4 over run i of C=1: 200 / 100 and 160 / 80
    assert values["sweep.c4.scaling"] == [2.0, 2.0]
    assert "sweep.c1.scaling" not in values
    recorded = build_baseline("p", "h", values, None, {}, Rule(3, 10)).baseline
    assert not any(k.endswith(".scaling") for k in recorded.metrics)  # hand-set targets only


def test_a_server_that_stopped_batching_fails_the_any_hardware_scaling_target():
    """The embedded default's hardware-independent target: C=4 gives at least 1.1x the
    aggregate tok/s of C=1, on any machine. A server that serializes requests does not."""
    from perfgate.gate.baseline import load_baseline
    from tests.helpers import ROOT

    target = load_baseline(ROOT / "baselines" / "llamacpp-gemma3-270m" / "any.json")
    key = "sweep.c4.scaling"
    assert target.metrics[key].value == 1.1
    planned = {"single": [1], "sweep": [1, 2, 4]}
    # slow machine, batching fine: 4 requests at 5 tok/s each vs 1 at 12 tok/s -> 1.67x
    fine = {"sweep": measurement({1: [12.0, 11.5, 12.5], 2: [8.0] * 3, 4: [5.0, 4.8, 5.2]})}
    checks = {c.key: c for c in GatePolicy().judge(fine, target, planned).checks}
    assert not checks[key].failed
    # fast machine, one request at a time: aggregate flat, 4 x 15 vs 60 -> 1.0x (with 10
    # runs of each level; from 3 the noise of the runs alone cannot tell 1.0 from 1.1)
    c1 = [60.0, 58.0, 62.0, 59.0, 61.0, 60.5, 59.5, 60.2, 59.8, 60.1]
    c4 = [15.0, 14.6, 15.3, 15.1, 14.9, 15.2, 14.8, 15.0, 15.05, 14.95]
    serial = {"sweep": measurement({1: c1, 2: [30.0] * 3, 4: c4})}
    checks = {c.key: c for c in GatePolicy().judge(serial, target, planned).checks}
    assert checks[key].verdict == "regressed", checks[key].message()
    assert checks["sweep.c1.agg_tok_s"].verdict != "regressed"  # fast enough in absolute terms


def test_a_timing_figure_the_harness_error_could_flip_is_untrusted():
    """TTFT baseline 100 ms, limit 105 ms. Measured 104 ms passes by 1 ms: with the
    harness's loop lag up to 2 ms that pass cannot be vouched for; with 0.5 ms it can. A
    TTFT of 200 ms regresses whatever the lag; tok/s figures are never affected."""
    base = recorded()

    def judged(ttft_s, lag_s):
        sweep = measurement({c: NOISY[:3] for c in (1, 2, 4)}, ttft_s=ttft_s, harness_lag_s=lag_s)
        runs = {"single": measurement({1: NOISY[:3]}), "sweep": sweep}
        return {c.key: c for c in GatePolicy().judge(runs, base, PLANNED).checks}

    shaky = judged(0.104, 0.002)
    check = shaky["sweep.c4.ttft_s"]
    assert check.verdict == "untrusted" and check.failed
    assert "timing error at this level is up to 2.00 ms" in check.why
    assert "within its limit" in check.why
    assert shaky["sweep.c4.agg_tok_s"].verdict == "pass"
    assert judged(0.104, 0.0005)["sweep.c4.ttft_s"].verdict == "pass"
    assert judged(0.104, None)["sweep.c4.ttft_s"].verdict == "pass"  # no monitor: as before
    assert judged(0.2, 0.002)["sweep.c4.ttft_s"].verdict == "regressed"
    near_past = judged(0.106, 0.002)["sweep.c4.ttft_s"]  # 1 ms past the 105 ms limit
    assert near_past.verdict == "untrusted" and "past its limit" in near_past.why


def test_the_exit_code_names_the_most_serious_failure():
    """pytest's own codes (interrupted, usage) stand; else correctness, then a regression,
    then a missing figure or no baseline, then too noisy; a clean run exits 0."""
    from perfgate.gate.policy import GateExit, exit_code
    from perfgate.gate.verdict import Check

    def checks(*verdicts: str) -> list[Check]:
        return [Check(key=f"sweep.c{i + 1}.agg_tok_s", verdict=v) for i, v in enumerate(verdicts)]

    def code(status: int, *verdicts: str, correctness=False, no_baseline=False) -> int:
        return exit_code(
            status, checks(*verdicts), correctness_failed=correctness, no_baseline=no_baseline
        )

    assert code(0, "pass", "improved") == GateExit.PASSED == 0
    # a verdict decides the code even where pytest itself saw no failure
    assert code(0, "too-noisy") == 10 and code(0, "creep") == code(0, "untrusted") == 1
    assert code(1, "pass", "too-noisy") == GateExit.TOO_NOISY == 10
    assert code(1, "too-noisy", "missing") == GateExit.MISSING == 11
    assert code(1, "pass", no_baseline=True) == GateExit.MISSING
    assert code(1, "too-noisy", "regressed", "missing") == GateExit.REGRESSED == 1
    assert code(1, "untrusted") == code(1, "creep") == GateExit.REGRESSED
    assert code(1, "regressed", correctness=True) == GateExit.CORRECTNESS == 12
    assert code(1, "pass") == 1  # another test failed: pytest's own code
    assert code(2, "regressed") == 2 and code(4) == 4  # interrupted; a usage error


SEVERITY = {"improved": 0, "pass": 1, "too-noisy": 2, "regressed": 3}


@given(
    st.lists(st.floats(40, 200), min_size=1, max_size=10),
    st.lists(st.floats(40, 200), min_size=1, max_size=10),
    st.integers(0, 19),
    st.floats(0.05, 0.95),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_worsening_any_run_never_improves_any_verdict_of_the_whole_policy(
    at_c1, at_c2, index, factor, another_host
):
    """GatePolicy.judge, every figure of a sweep (aggregate and per-request tok/s, TTFT, at
    C=1 and C=2) against a recorded baseline: one run slowed by any factor (tok/s down,
    TTFT up alike) never judges any figure better, on this host or another. (The scaling
    figure, a ratio to C=1, is not in a recorded baseline: slower C=1 runs are better
    scaling by its definition.)"""
    base = recorded()
    policy = GatePolicy(another_host=another_host)
    runs = {1: at_c1, 2: at_c2}
    c = 1 if index < len(at_c1) or not at_c2 else 2
    i = index % len(runs[c])

    def judged(slow: float) -> dict[str, str]:
        m = Measurement()
        for level, values in runs.items():
            m.levels += [
                level_run(level, v * (slow if (level, j) == (c, i) else 1.0),
                          0.1 / (slow if (level, j) == (c, i) else 1.0), repeat=j)
                for j, v in enumerate(values)
            ]  # fmt: skip
        checks = policy.judge({"sweep": m}, base, {"sweep": [1, 2]}).checks
        return {ch.key: ch.verdict for ch in checks if ch.verdict in SEVERITY}

    before, after = judged(1.0), judged(factor)
    for key, verdict in before.items():
        assert SEVERITY[after[key]] >= SEVERITY[verdict], (key, verdict, after[key])


def test_another_host_passes_a_figure_within_the_spread_between_hosts_and_says_so():
    """A healthy server on a host 30% slower than the recording's: on the recording's host
    the tok/s figures past the 25% limit cannot pass (another host is how it can be
    this slow and healthy); judged as another host, the limit lies further by the spread
    between hosts (20% at 95%) and they pass. The same runs measured again as the
    policy asks: on the recording's host the level is measured again, on another not."""
    base = build_baseline(
        "p", "h", run_values({"sweep": measurement({1: NOISY})}), None, {}, Rule(3, 10),
        min_tolerance=0.25,
    ).baseline  # fmt: skip
    slow = [v * 0.7 for v in NOISY[:5]]
    m = {"sweep": measurement({1: slow})}
    here = {c.key: c.verdict for c in GatePolicy().judge(m, base, {"sweep": [1]}).checks}
    there = {
        c.key: c.verdict
        for c in GatePolicy(another_host=True).judge(m, base, {"sweep": [1]}).checks
    }
    assert here["sweep.c1.agg_tok_s"] in ("too-noisy", "regressed"), here
    assert there["sweep.c1.agg_tok_s"] == "pass", there
    runs = [level_run(1, v * 0.75, repeat=i) for i, v in enumerate(NOISY[:3])]  # at the limit
    assert GatePolicy(max_runs=10).after_level("sweep", runs, base) == "repeat"
    assert GatePolicy(max_runs=10, another_host=True).after_level("sweep", runs, base) == "next"


def test_a_small_family_is_still_measured_up_to_the_most_runs():
    """The rule's most runs are the policy's, whatever the number of figures: a figure near
    its limit in a one-figure baseline is measured again past 3 runs, up to 10."""
    base = recorded()
    key = "sweep.c1.agg_tok_s"
    one = base.model_copy(
        update={"metrics": {"sweep.c1.agg_tok_s": base.metrics["sweep.c1.agg_tok_s"]}}
    )
    edge = 100.0 * (1 - one.metrics["sweep.c1.agg_tok_s"].tolerance)
    policy = GatePolicy(min_runs=3, max_runs=10)
    near = [level_run(1, edge * f, repeat=i) for i, f in enumerate((0.99, 1.01, 1.0, 1.0))]
    assert policy.after_level("sweep", near, one) == "repeat"
    assert policy.rule(one).max_runs == 10 and policy.rule(one, 4).max_runs == 4
    # judged once no more runs come (4 here, in a baseline of 12 figures): final
    m = {"sweep": measurement({1: [edge * f for f in (0.99, 1.01, 1.0, 1.0)]})}
    checks = {c.key: c for c in policy.judge(m, base, {"sweep": [1]}).checks}
    assert checks[key].verdict == "too-noisy", checks[key].message()


def test_no_more_runs_without_a_baseline_or_while_recording():
    """With no baseline, or while recording one, a level stops at its minimum runs, even
    where a baseline figure sits near its limit."""
    base = recorded()
    edge = 100.0 * (1 - base.metrics["sweep.c1.per_request_tok_s"].tolerance)
    near = [level_run(1, edge * f, repeat=i) for i, f in enumerate((0.99, 1.01, 1.0))]
    assert GatePolicy().after_level("sweep", near, base) == "repeat"
    assert GatePolicy().after_level("sweep", near, None) == "next"
    assert GatePolicy(recording=True).after_level("sweep", near, base) == "next"


def test_the_scaling_target_is_measured_again_while_undecided():
    """The any tier's scaling target (C=2 at least 1.1x C=1 here) is read while measuring:
    a C=2 level whose scaling sits at its target is measured again, one clearly above it
    is not; without the C=1 runs there is no scaling to read."""
    from perfgate.gate.baseline import Baseline, Expectation

    target = Baseline(
        schema_version=2, profile="p", hardware="any",
        metrics={"sweep.c2.scaling": Expectation(value=1.1, tolerance=0.0, direction="higher")},
    )  # fmt: skip
    first = [level_run(1, 10.0, repeat=i) for i in range(3)]
    at = [level_run(2, 10.0 * 1.1 / 2 * f, repeat=i) for i, f in enumerate((0.98, 1.03, 1.0))]
    clear = [level_run(2, 10.0 * 1.6 / 2, repeat=i) for i in range(3)]
    policy = GatePolicy()
    assert policy.after_level("sweep", at, target, first) == "repeat"
    assert policy.after_level("sweep", clear, target, first) == "next"
    assert policy.after_level("sweep", at, target) == "next"  # no C=1 runs: nothing to read


def test_missing_figures_keep_their_baseline_value_and_tok_s_is_never_untrusted():
    base = recorded()
    sweep = measurement({1: NOISY[:3]}, harness_lag_s=100.0)  # later than tok/s's margin
    verdicts = GatePolicy().judge({"sweep": sweep}, base, PLANNED)
    missing = {c.key: c for c in verdicts.of("missing")}
    key = "sweep.c2.agg_tok_s"
    assert missing[key].baseline == base.metrics[key].value
    checks = {c.key: c for c in verdicts.checks}
    assert checks["sweep.c1.agg_tok_s"].verdict == "pass"  # not a timing figure
    assert checks["sweep.c1.ttft_s"].verdict == "untrusted"  # a timing figure


def test_the_rule_carries_the_familys_size_and_its_rate():
    """Derived tolerances and verdicts share the profile's false-failure rate among all
    of its baseline figures (Bonferroni): the rule must carry both, and a forced final
    decision keeps them."""
    base = recorded()
    policy = GatePolicy(min_runs=3, max_runs=10, false_failure_rate=0.05)
    family = len(base.metrics)
    assert family > 2
    assert policy.rule(base) == Rule(3, 10, family, 0.05)
    assert policy.rule(None) == Rule(3, 10, 1, 0.05)
    assert policy.rule(base, runs=2) == Rule(3, 2, family, 0.05)  # final at 2 (or early)
    assert policy.rule(base, runs=5) == Rule(3, 5, family, 0.05)
    assert policy.rule(base).per_figure_rate == pytest.approx(0.05 / family)


def test_the_baseline_is_the_exact_keys_else_any_else_none():
    exact, anywhere = recorded(), recorded(accept=0.5)
    assert choose_baseline({"h": exact, "any": anywhere}, "h") == (exact, "exact")
    assert choose_baseline({"other": exact, "any": anywhere}, "h") == (anywhere, "any")
    assert choose_baseline({"other": exact}, "h") == (None, "none")
    assert choose_baseline({}, "h") == (None, "none")


def test_early_abort_reads_every_tok_s_figure_the_baseline_has_and_only_those():
    """A baseline without a level's aggregate tok/s still aborts on its per-request tok/s;
    one without either never aborts on that level (nor crashes); a TTFT far worse never
    aborts (it is judged at the end, with its runs)."""
    base = recorded()
    policy = GatePolicy(abort_below=0.5)
    no_agg = base.model_copy(
        update={"metrics": {k: v for k, v in base.metrics.items() if k != "sweep.c1.agg_tok_s"}}
    )
    assert policy.abort_reason("sweep", level_run(1, 40.0), no_agg).startswith(
        "early abort at C=1: sweep.c1.per_request_tok_s"
    )
    neither = base.model_copy(
        update={
            "metrics": {
                k: v
                for k, v in base.metrics.items()
                if not k.startswith("sweep.c1.") or k == "sweep.c1.ttft_s"
            }
        }
    )
    assert policy.abort_reason("sweep", level_run(1, 40.0), neither) is None
    assert policy.abort_reason("sweep", level_run(1, 100.0, ttft_s=5.0), base) is None
    assert policy.abort_reason("sweep", level_run(1, 1.0), None) is None  # nothing to compare


def test_early_abort_looks_past_a_tok_s_figure_that_is_fine():
    """Each tok/s figure is looked at: one within its baseline does not end the look, so
    the next, far below its own, still aborts."""
    base = recorded()
    agg = base.metrics["sweep.c1.agg_tok_s"]
    lowered = base.model_copy(
        update={
            "metrics": {
                **base.metrics,
                "sweep.c1.agg_tok_s": agg.model_copy(update={"value": 40.0}),
            }
        }
    )
    reason = GatePolicy(abort_below=0.5).abort_reason("sweep", level_run(1, 40.0), lowered)
    assert reason is not None and reason.startswith(
        "early abort at C=1: sweep.c1.per_request_tok_s"
    )


def test_early_abort_on_another_host_allows_for_the_spread_between_hosts():
    """A baseline that records a wide spread between hosts (40%): 30% of it aborts on the
    recording's host, and not on another, where that spread is noise too."""
    base = recorded()
    wide = base.model_copy(
        update={
            "metrics": {
                k: v.model_copy(update={"host_sigma": 0.4, "host_df": 10.0})
                if k.startswith("sweep.c1.") and k.endswith("tok_s")
                else v
                for k, v in base.metrics.items()
            }
        }
    )
    run = level_run(1, 30.0)
    assert GatePolicy(abort_below=0.5).abort_reason("sweep", run, wide) is not None
    assert GatePolicy(abort_below=0.5, another_host=True).abort_reason("sweep", run, wide) is None


def test_a_measurement_fails_on_failed_requests_an_early_stop_or_levels_not_run():
    """What fails a measurement besides its figures (perf_gate reports each)."""
    from perfgate.gate.verdict import measurement_problems

    clean = measurement({1: [100.0, 101.0, 99.0]})
    assert measurement_problems("sweep", clean) == []
    failing = Measurement(levels=[level_run(2, 50.0, fail=1)])
    [problem] = measurement_problems("sweep", failing)
    assert problem.startswith("sweep C=2: 1 of 3 requests failed: HTTP 500")
    stopped = measurement({1: [100.0]})
    stopped.aborted, stopped.not_run = "early abort at C=1: ...", [2, 4]
    assert measurement_problems("sweep", stopped) == ["early abort at C=1: ..."]
    stopped.aborted = None
    assert measurement_problems("sweep", stopped) == ["sweep: levels not run: [2, 4]"]
