"""Run history (append/load), the slow-creep rule, the history table, plot and CLI."""

import random
import statistics
import sys
from pathlib import Path

import pytest

from perfgate import cli
from perfgate.errors import PerfgateError, ProfileError
from perfgate.gate.baseline import load_baseline
from perfgate.gate.creep import FigurePoint, HistoryEntry, apply_creep_rule
from perfgate.gate.policy import GatePolicy
from perfgate.gate.verdict import Check
from perfgate.profile import load_profile
from perfgate.render.history import plot_history, render_history
from perfgate.render.plots.common import PlotsUnavailable, require_matplotlib
from perfgate.results.history import append_entry, entry_from_run, history_path, load_history
from perfgate.results.run import BaselineRef, RunRecord, load_run
from tests.unit.test_profile import VALID

ROOT = Path(__file__).resolve().parents[2]
AGG = "sweep.c4.agg_tok_s"
TTFT = "single.c1.ttft_s"


def make_check(delta, key=AGG, base=100.0, verdict=None, direction="higher", tol=0.10):
    """A judged check ``delta`` percent from ``base``; pass unless past the limit."""
    measured = base * (1 + delta / 100)
    limit = base * (1 - tol) if direction == "higher" else base * (1 + tol)
    past = measured < limit if direction == "higher" else measured > limit
    return Check(
        key=key,
        verdict=verdict or ("regressed" if past else "pass"),
        why="clearly within the limit",
        measured=measured,
        baseline=base,
        tolerance=tol,
        limit=limit,
        direction=direction,
        unit="tok/s" if direction == "higher" else "s",
        delta_pct=(measured - base) / base * 100,
    )


def make_run(checks, hardware="hw-a", day=1, status="passed"):
    return RunRecord(
        perfgate_version="test",
        created_at=f"2026-01-{day:02d}T10:00:00+00:00",
        status=status,
        profile={"name": "p"},
        profile_digest="d",
        engine="llamacpp",
        engine_version="b1234",
        launcher="attach",
        hardware={"key": hardware},
        git_commit=f"c0ffee{day:02d}".ljust(40, "0"),
        checks=checks,
        baseline=BaselineRef(
            hardware_key=hardware, tier="exact", path=f"baselines/p/{hardware}.json"
        ),
    )


def make_entry(checks, hardware="hw-a", day=1):
    entry = entry_from_run(make_run(checks, hardware, day), f"runs/{day}.json")
    assert entry is not None
    return entry


def simulate(deltas, *, runs=5, margin=0.02, bases=None, direction="higher", key=AGG):
    """Run after run: judge, apply the rule against the history so far, record the run.
    Returns each run's verdict."""
    history, verdicts = [], []
    for i, delta in enumerate(deltas):
        base = bases[i] if bases else 100.0
        checks = [make_check(delta, key=key, base=base, direction=direction)]
        judged = apply_creep_rule(checks, history, runs=runs, margin=margin, hardware_key="hw-a")
        verdicts.append(judged[0].verdict)
        history.append(make_entry(judged, day=i + 1))
    return verdicts


# --- the creep rule ---------------------------------------------------------------------


def test_a_figure_sliding_one_percent_a_run_fires_after_five_runs_beyond_the_margin():
    deltas = [-0.6, -1.6, -2.6, -3.6, -4.6, -5.6, -6.6, -7.6]  # beyond 2% from run 3 on
    verdicts = simulate(deltas)
    # run 7 is the fifth in a row more than 2% worse; run 6 only the fourth
    assert verdicts == ["pass"] * 6 + ["creep", "creep"]


def test_the_creep_check_fails_and_says_why():
    history = [make_entry([make_check(d)], day=i) for i, d in enumerate([-2.4, -3.1, -3.3, -4.0])]
    (check,) = apply_creep_rule([make_check(-4.2)], history, runs=5, margin=0.02)
    assert check.verdict == "creep" and check.failed
    assert "more than 2.0% in 5 runs in a row (-2.4%, -3.1%, -3.3%, -4.0%, -4.2%)" in check.why
    msg = check.message()
    assert "CREEP: within its tolerance this run, but worse than the baseline" in msg, msg
    assert "Δ -4.2%" in msg and "tolerance 10.0%" in msg


def test_exactly_at_the_margin_is_not_worse_than_it():
    # 98 of 100 is -2.0000000000000018% in floats: not "more than 2%"
    assert simulate([-2.0] * 8) == ["pass"] * 8


def test_one_run_back_within_the_margin_breaks_the_streak():
    deltas = [-3, -3, -3, -1.5, -3, -3, -3, -3, -3]
    assert simulate(deltas) == ["pass"] * 8 + ["creep"]


def test_a_re_recorded_baseline_restarts_the_count():
    bases = [100.0] * 4 + [95.0] * 5
    assert simulate([-3.0] * 9, bases=bases) == ["pass"] * 8 + ["creep"]


def test_other_hardware_is_not_counted():
    worse_elsewhere = [make_entry([make_check(-5)], hardware="hw-b", day=i) for i in range(4)]
    (check,) = apply_creep_rule(
        [make_check(-5)], worse_elsewhere, runs=5, margin=0.02, hardware_key="hw-a"
    )
    assert check.verdict == "pass"
    # a good run on other hardware between this hardware's runs does not break the streak
    mixed = []
    for i in range(4):
        mixed.append(make_entry([make_check(-3)], hardware="hw-a", day=2 * i + 1))
        mixed.append(make_entry([make_check(+1)], hardware="hw-b", day=2 * i + 2))
    (check,) = apply_creep_rule([make_check(-3)], mixed, runs=5, margin=0.02, hardware_key="hw-a")
    assert check.verdict == "creep"


def test_lower_is_better_figures_creep_upwards():
    assert simulate([3.0] * 6, key=TTFT, direction="lower") == ["pass"] * 4 + ["creep"] * 2
    assert simulate([-3.0] * 6, key=TTFT, direction="lower") == ["pass"] * 6  # faster


def test_failing_and_missing_checks_keep_their_verdict():
    history = [make_entry([make_check(-5)], day=i) for i in range(4)]
    regressed = make_check(-15)
    assert regressed.verdict == "regressed"
    untrusted = make_check(-5, verdict="untrusted")
    missing = Check(key="sweep.c8.agg_tok_s", verdict="missing", why="level not run")
    out = apply_creep_rule([regressed, untrusted, missing], history, runs=5, margin=0.02)
    assert out == [regressed, untrusted, missing]
    assert out[0] is not regressed  # copies


def test_too_short_a_history_never_fires_and_the_input_is_not_changed():
    history = [make_entry([make_check(-5)], day=i) for i in range(3)]
    original = make_check(-5)
    out = apply_creep_rule([original], history, runs=5, margin=0.02)
    assert out[0].verdict == "pass"
    out = apply_creep_rule([original], history, runs=4, margin=0.02)
    assert out[0].verdict == "creep" and original.verdict == "pass"


@pytest.mark.parametrize(("runs", "margin"), [(1, 0.02), (5, 0.0), (5, 1.0)])
def test_bad_rule_settings_are_refused(runs, margin):
    with pytest.raises(ValueError, match="creep"):
        apply_creep_rule([make_check(-5)], [], runs=runs, margin=margin)


# --- how often it fires: simulation against the arithmetic -----------------------------


def one_figure_entry(measured, base=100.0):
    point = FigurePoint(
        measured=measured,
        baseline=base,
        delta_pct=(measured - base) / base * 100,
        verdict="pass",
        direction="higher",
    )
    return HistoryEntry(
        created_at="t", profile="p", status="passed", engine="e", figures={AGG: point}
    )


@pytest.mark.parametrize("sigma", [0.01, 0.04])
def test_false_fire_rate_matches_the_arithmetic(sigma):
    """Noise alone (relative sd ``sigma``, no change): a streak of 5 fires with chance
    P(one run worse than 2%) ** 5."""
    runs, margin, trials = 5, 0.02, 20_000
    p_one = statistics.NormalDist().cdf(-margin / sigma)
    predicted = p_one**runs
    rng = random.Random(13)
    fired = 0
    for _ in range(trials):
        values = [100.0 * (1 + rng.gauss(0, sigma)) for _ in range(runs)]
        history = [one_figure_entry(v) for v in values[:-1]]
        now = make_check((values[-1] - 100.0), tol=0.5)
        (check,) = apply_creep_rule([now], history, runs=runs, margin=margin)
        fired += check.verdict == "creep"
    expected = predicted * trials
    sd = (trials * predicted * (1 - predicted)) ** 0.5
    if sigma == 0.01:
        assert predicted < 1e-8 and fired == 0  # 1% noise never fakes a 2% creep
    else:
        assert 40 < expected < 70 and abs(fired - expected) < 4 * sd, (fired, expected)


def test_a_real_three_percent_loss_within_tolerance_is_caught_in_the_expected_runs():
    """A release costs 3% (inside a 10% tolerance), noise 1%: each run is more than 2% worse
    with chance p, and the rule fires after (1 - p^5) / ((1 - p) p^5) runs on average."""
    runs, margin, sigma, trials = 5, 0.02, 0.01, 1000
    p = statistics.NormalDist().cdf((0.98 / 0.97 - 1) / sigma)
    expected_wait = (1 - p**runs) / ((1 - p) * p**runs)
    rng = random.Random(3)
    waits = []
    for _ in range(trials):
        history = []
        for n in range(1, 200):
            measured = 100.0 * 0.97 * (1 + rng.gauss(0, sigma))
            check = make_check(measured - 100.0)
            assert check.verdict == "pass"  # no single run's tolerance catches it
            (judged,) = apply_creep_rule([check], history, runs=runs, margin=margin)
            if judged.verdict == "creep":
                waits.append(n)
                break
            history.append(one_figure_entry(measured))
    assert len(waits) == trials and min(waits) == runs
    mean, sd = statistics.fmean(waits), statistics.stdev(waits)
    assert 8 < expected_wait < 9
    assert abs(mean - expected_wait) < 4 * sd / trials**0.5, (mean, expected_wait)


def test_a_three_percent_per_release_creep_is_caught_before_the_tolerance_catches_it():
    """3% worse each release, 10% tolerance, noise 1%: at release 3 (-9%) the tolerance
    alone fails it with chance q; with 3 runs the rule fails it unless noise hid release
    1's -3% (chance 1 - p)."""
    runs, margin, sigma, trials = 3, 0.02, 0.01, 2000
    normal = statistics.NormalDist()
    p = normal.cdf((0.98 / 0.97 - 1) / sigma)  # release 1 counted as more than 2% worse
    q = normal.cdf((0.90 / 0.91 - 1) / sigma)  # release 3 past the 10% tolerance
    rng = random.Random(5)
    creep, failed = 0, 0
    for _ in range(trials):
        history, verdicts = [], []
        for release in range(1, 4):
            measured = 100.0 * (1 - 0.03 * release) * (1 + rng.gauss(0, sigma))
            (judged,) = apply_creep_rule(
                [make_check(measured - 100.0)], history, runs=runs, margin=margin
            )
            verdicts.append(judged)
            history.append(one_figure_entry(measured))
        assert [v.verdict for v in verdicts[:2]] == ["pass", "pass"]
        creep += verdicts[2].verdict == "creep"
        failed += verdicts[2].failed
    predicted = (1 - q) * p
    sd = (trials * predicted * (1 - predicted)) ** 0.5
    assert abs(creep - predicted * trials) < 4 * sd, (creep, predicted * trials)
    assert q < 0.2 and failed / trials > 0.8  # caught at release 3: mostly by the rule


# --- the history file -------------------------------------------------------------------


def test_entries_round_trip_through_the_file(tmp_path):
    path = history_path(tmp_path / "deep" / "history", "p")
    assert path.name == "p.jsonl" and load_history(path) == []
    entries = [
        make_entry([make_check(-1 - i), make_check(2, key=TTFT, direction="lower")], day=i + 1)
        for i in range(3)
    ]
    for entry in entries:
        append_entry(path, entry)
    assert load_history(path) == entries
    assert path.read_text().count("\n") == 3


def test_a_bad_middle_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    for i in range(3):
        append_entry(path, make_entry([make_check(-1)], day=i + 1))
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = '{"created_at": "2026-01-02", "profile": "p"}\n'
    path.write_text("".join(lines))
    with pytest.raises(PerfgateError) as err:
        load_history(path)
    assert f"{path}:2:" in str(err.value) and "delete" in str(err.value)
    # a bad complete last line (with its newline) is an error too
    path.write_text("".join([lines[0], lines[2], "not json\n"]))
    with pytest.raises(PerfgateError, match=f"{path}:3:"):
        load_history(path)


def test_a_truncated_last_line_is_skipped_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "p.jsonl"
    first, second, third = (make_entry([make_check(-1)], day=d) for d in (1, 2, 3))
    append_entry(path, first)
    line = second.model_dump_json() + "\n"
    with path.open("a") as f:
        f.write(line[: len(line) // 2])  # a crash mid-write
    assert load_history(path) == [first]
    append_entry(path, third)
    assert load_history(path) == [first, third]
    assert path.read_text().count("\n") == 2


def test_a_complete_last_line_without_newline_is_kept_on_append(tmp_path):
    path = tmp_path / "p.jsonl"
    first, second = make_entry([make_check(-1)], day=1), make_entry([make_check(-2)], day=2)
    path.write_text(first.model_dump_json())  # edited by hand, no final newline
    append_entry(path, second)
    assert load_history(path) == [first, second]


def test_entry_from_a_real_recorded_run_and_its_judged_checks():
    run_path = ROOT / "baselines/llamacpp-gemma3-270m/cpu-2x-amd-epyc-avx512.run.json.gz"
    run = load_run(run_path)
    baseline = load_baseline(run_path.parent / "cpu-2x-amd-epyc-avx512.json")
    planned = {name: sorted(m.by_concurrency()) for name, m in run.measurements.items()}
    verdicts = GatePolicy(min_runs=1, max_runs=1).judge(run.measurements, baseline, planned)
    run.checks = verdicts.checks
    entry = entry_from_run(run, str(run_path))
    assert entry is not None
    judged = {
        c.key: c for c in verdicts.checks if c.measured is not None and c.baseline is not None
    }
    assert judged and set(entry.figures) == set(judged)
    assert entry.profile == "llamacpp-gemma3-270m"
    assert entry.hardware_key == "cpu-2x-amd-epyc-avx512"
    assert entry.git_commit == run.git_commit and entry.run_json == str(run_path)
    for key, point in entry.figures.items():
        check = judged[key]
        assert point.measured == check.measured and point.baseline == check.baseline
        assert point.verdict == check.verdict and point.direction == check.direction
        assert point.delta_pct == pytest.approx(check.delta_pct)
    # the run judged against its own baseline: no creep from one run, and the rule leaves
    # every check as it is with a short history
    assert apply_creep_rule(verdicts.checks, [entry], runs=3, margin=0.02) == verdicts.checks
    # nothing to record from an interrupted run, or one that judged nothing
    assert entry_from_run(run.model_copy(update={"status": "interrupted"}), "x") is None
    unjudged = [c for c in verdicts.checks if c.baseline is None or c.measured is None]
    assert entry_from_run(run.model_copy(update={"checks": unjudged}), "x") is None


# --- rendering ---------------------------------------------------------------------------


def creeping_history(n=9):
    """A profile whose sweep C=4 tok/s slides 1% a run while the rest holds."""
    history = []
    for i in range(n):
        checks = [
            make_check(-0.6 - i, key=AGG, base=120.0),
            make_check(0.5 * (-1) ** i, key="sweep.c1.agg_tok_s", base=60.0),
            make_check(-1.0 + 0.3 * i, key="single.c1.per_request_tok_s", base=58.0),
            make_check(1.5 + 0.2 * i, key=TTFT, base=0.2, direction="lower", tol=0.25),
            make_check(2.0 + 0.5 * i, key="sweep.c4.ttft_s", base=0.9, direction="lower", tol=0.25),
        ]
        if i == n - 1:
            checks.append(make_check(-12, key="sweep.c1.per_request_tok_s", base=50.0))
        judged = apply_creep_rule(checks, history, runs=5, margin=0.02, hardware_key="hw-a")
        history.append(make_entry(judged, day=i + 1))
    return history


def test_the_table_has_a_row_per_run_and_marks_creep():
    history = creeping_history()
    text = render_history(history)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if AGG in line)
    assert lines[header].startswith("#  date (UTC)")
    assert "(tok/s, higher is better)" in lines[header + 1]
    rows = lines[header + 3 : header + 12]
    assert [row.split()[0] for row in rows] == [str(i) for i in range(1, 10)]
    assert "2026-01-09 10:00  c0ffee09  b1234" in rows[-1]
    # run 7 is the fifth in a row more than 2% worse, run 6 the fourth
    assert rows[5].endswith(" 113.3 -5.6% |       0.9405 +4.5% C")
    assert "112.1 -6.6% C" in rows[6]
    assert "-12.0% R" in text and "C creep" in text
    assert all(len(line) <= 120 for line in lines[:-1])
    only = render_history(history, [TTFT])
    assert TTFT in only and AGG not in only


def test_plot_has_a_panel_per_kind_of_figure(tmp_path):
    plt = require_matplotlib()
    out = plot_history(creeping_history(), tmp_path / "h" / "history.png", margin=0.02)
    assert out.is_file()
    assert_picture(out)
    assert plt.get_fignums() == []  # closed after saving


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotsUnavailable, match=r"perfgate\[plots\]"):
        plot_history(creeping_history(), tmp_path / "h.png")


def assert_picture(path):
    image = require_matplotlib().imread(path)
    height, width = image.shape[:2]
    assert height > 400 and width > 800
    rgb = image[..., :3].reshape(-1, 3)
    not_white = (rgb < 0.95).any(axis=1).mean()
    colours = len({tuple(px) for px in (rgb[::97] * 255).round().astype(int).tolist()})
    assert not_white > 0.03 and colours > 20, (not_white, colours)


# --- CLI -----------------------------------------------------------------------------------


def test_cli_prints_the_table_and_writes_the_plot(tmp_path, capsys):
    directory = tmp_path / "hist"
    for entry in creeping_history():
        append_entry(history_path(directory, "p"), entry)
    png = tmp_path / "trend.png"
    code = cli.main(["history", "p", "--history-dir", str(directory), "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "p on hw-a, 9 runs" in out and AGG in out and "C creep" in out
    assert f"plot written to {png}" in out
    assert_picture(png)
    code = cli.main(["history", "p", "--history-dir", str(directory), "--figure", "single.*"])
    out = capsys.readouterr().out
    assert code == 0 and TTFT in out and AGG not in out


def test_cli_without_history_says_where_it_looked(tmp_path, capsys):
    code = cli.main(["history", "nope", "--history-dir", str(tmp_path)])
    assert code == 1
    assert str(tmp_path / "nope.jsonl") in capsys.readouterr().out


def test_cli_unknown_figure_lists_the_known_ones(tmp_path, capsys):
    append_entry(history_path(tmp_path, "p"), make_entry([make_check(-1)]))
    code = cli.main(["history", "p", "--history-dir", str(tmp_path), "--figure", "sweep.c9.x"])
    err = capsys.readouterr().err
    assert code == 2 and "sweep.c9.x" in err and AGG in err


# --- profile settings ----------------------------------------------------------------------

PROFILE = VALID.format(name="p") + "[gate]\n"


def test_creep_settings_default_off(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    gate = load_profile(str(path), tmp_path).gate
    assert gate.creep_runs is None and gate.creep_margin == 0.02
    path.write_text(PROFILE + "creep_runs = 5\ncreep_margin = 0.03\n")
    gate = load_profile(str(path), tmp_path).gate
    assert gate.creep_runs == 5 and gate.creep_margin == 0.03


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("creep_runs = 1", "gate.creep_runs"),
        ("creep_runs = 2.5", "gate.creep_runs"),
        ("creep_margin = 0", "gate.creep_margin"),
        ("creep_margin = 1.0", "gate.creep_margin"),
        ("creep_margin = -0.02", "gate.creep_margin"),
    ],
)
def test_bad_creep_settings_name_the_field(tmp_path, setting, field):
    path = tmp_path / "p.toml"
    path.write_text(PROFILE + setting + "\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(path), tmp_path)
    assert f"  - {field}:" in str(err.value)


def test_a_corrupt_history_is_a_usage_error_before_any_server_starts(tmp_path):
    from tests.helpers import TINY, profile_toml, run_pytest

    tiny = profile_toml(TINY, tmp_path, name="tiny")
    tiny.write_text(tiny.read_text().replace("[gate]\n", "[gate]\ncreep_runs = 3\n"))
    history = tmp_path / "history"
    history.mkdir()
    (history / "tiny.jsonl").write_text('{"not": "an entry"}\n{"also": "bad"}\n')
    result = run_pytest(
        "-m", "perf", f"--perf-profile={tiny}", f"--perf-history={history}", "suites/perf"
    )
    out = result.stdout + result.stderr
    assert result.returncode == 4, out  # pytest's usage error
    assert f"{history / 'tiny.jsonl'}:1: not a perfgate history entry" in out
    assert "fix that line or delete it" in out
    assert "starting llamacpp" not in out
