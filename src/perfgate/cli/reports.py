"""Commands that read what runs left: profiles, baselines, compare, report, history, plot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfgate.diagnose.causes import diagnose
from perfgate.errors import PerfgateError
from perfgate.gate.baseline import load_profile_baselines
from perfgate.gate.figures import delta_text
from perfgate.gate.policy import GatePolicy
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import run_values
from perfgate.gate.verdict import Check
from perfgate.profile import GateSpec, available_profiles, load_profile
from perfgate.render.formats import Context, formats
from perfgate.render.history import plot_history, render_history, select_keys
from perfgate.results.history import history_path, load_history
from perfgate.results.run import RunRecord, load_run


def cmd_profiles(args: argparse.Namespace) -> int:
    """``perfgate profiles``: list the profiles."""
    directory = Path(args.profiles_dir)
    for name in available_profiles(directory):
        profile = load_profile(name, directory)
        print(f"{name:32} {profile.engine:9} {profile.hardware:12} {profile.description}")
    return 0


def cmd_baseline_rederive(args: argparse.Namespace) -> int:
    """Derive a profile's tolerances and detectable drops again from each exact
    baseline's kept run JSON, with this perfgate's rules; values, hand-set tolerances,
    floors, host spreads and facts stay as they are."""
    from datetime import UTC, datetime

    from perfgate import __version__
    from perfgate.gate.baseline import ANY_HARDWARE, baseline_path, save_baseline
    from perfgate.gate.recording import diff_lines
    from perfgate.run.settings import gate_policy

    directory = Path(args.baselines_dir)
    profile = load_profile(args.profile, Path(args.profiles_dir))
    policy = gate_policy(profile, profile.gate.record_repeats, recording=True)
    baselines = load_profile_baselines(directory, args.profile)
    if not baselines:
        print(f"no baseline for {args.profile} under {directory}/")
        return 1
    for hardware, old in baselines.items():
        path = baseline_path(directory, args.profile, hardware)
        kept = path.with_suffix(".run.json.gz")
        if hardware == ANY_HARDWARE or not kept.exists():
            print(f"{path}: no kept run JSON ({kept.name}): left as it is")
            continue
        run = load_run(kept)
        provenance = {
            **old.provenance,
            "rederived_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "rederived_by": f"perfgate {__version__}",
        }
        recorded = build_baseline(
            args.profile,
            hardware,
            run_values(run.measurements, policy.chosen(old)),
            old,
            provenance,
            policy.rule(None),
            facts=old.facts,
            min_tolerance=profile.gate.min_tolerance,
            host_id=str(old.provenance.get("host_id") or ""),
        )
        save_baseline(path, recorded.baseline)
        print(f"{path}: re-derived from {kept.name}")
        for line in diff_lines(old, recorded):
            print(f"  {line}")
    return 0


def cmd_baseline_show(args: argparse.Namespace) -> int:
    """``perfgate baseline show``: print a profile's baselines."""
    baselines = load_profile_baselines(Path(args.baselines_dir), args.profile)
    if not baselines:
        print(
            f"no baseline for {args.profile} under {args.baselines_dir}/; record one with "
            f"`perfgate run {args.profile} --perf-update-baselines`"
        )
        return 1
    from perfgate.gate.recording import supported_for, too_tight
    from perfgate.run.settings import gate_policy

    try:
        profile = load_profile(args.profile, Path(args.profiles_dir))
        policy = gate_policy(profile, profile.gate.repeats)
    except PerfgateError:
        gate = GateSpec()
        policy = GatePolicy(gate.repeats, gate.repeats + gate.max_extra_repeats)
        print(f"(profile {args.profile} not found under {args.profiles_dir}/: [gate] defaults)")
    print(
        f"each figure: value, tolerance, noise; the smallest drop it catches 95% of the time, "
        f"and the narrowest tolerance its noise supports ({policy.min_runs}..{policy.max_runs} "
        f"runs a level, {policy.false_failure_rate:.0%} false failures a build); narrower "
        "ends TOO NOISY"
    )
    for hardware, baseline in baselines.items():
        print(f"{args.baselines_dir}/{args.profile}/{hardware}.json")
        for key, value in sorted(baseline.provenance.items()):
            print(f"  {key}: {value}")
        rule = policy.rule(baseline)
        supported = {}
        for key, exp in baseline.metrics.items():
            need = supported_for(exp, rule)
            if need is not None:
                supported[key] = need
            print(
                f"  {key:36} {exp.value:>10.4g} {exp.unit:6} ±{exp.tolerance:.1%} "
                f"{exp.tolerance_source:8} ({exp.direction} is better"
                + (f", noise {exp.noise_sigma:.1%} over {exp.runs} runs" if exp.noise_sigma else "")
                + (f"; catches a drop of {exp.detectable:.0%}" if exp.detectable else "")
                + (f"; noise supports ±{need:.0%}" if need is not None else "")
                + ")"
            )
        for line in too_tight(baseline, supported):
            print(line.replace("perfgate: warning: ", "  warning: "))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``perfgate compare``: gate NEW against OLD (two run JSON files)."""
    old, new = load_run(Path(args.old)), load_run(Path(args.new))
    # the run JSON's raw records are the source of truth: figures are recomputed from them
    old_m = {name: m.recomputed() for name, m in old.measurements.items()}
    new_m = {name: m.recomputed() for name, m in new.measurements.items()}
    print(
        f"OLD {args.old}: {old.engine} {old.engine_version}, profile "
        f"{old.profile.get('name')}, {old.created_at}"
    )
    print(
        f"NEW {args.new}: {new.engine} {new.engine_version}, profile "
        f"{new.profile.get('name')}, {new.created_at}"
    )
    if "imported" in (old.launcher, new.launcher):
        print("note: an imported run keeps no workload: check that both ran the same one")
    elif old.profile.get("workload") != new.profile.get("workload"):
        print("warning: the two runs used different workloads; figures may not be comparable")
    # OLD's [gate] settings, the profile's defaults where it kept none (older versions'
    # settings that no longer exist are left out)
    kept = old.profile.get("gate") or {}
    gate = GateSpec.model_validate({k: v for k, v in kept.items() if k in GateSpec.model_fields})
    policy = GatePolicy(
        min_runs=1,
        max_runs=gate.repeats + gate.max_extra_repeats,
        false_failure_rate=gate.false_failure_rate,
    )
    # OLD becomes the baseline exactly as --perf-update-baselines would record it
    recorded = build_baseline(
        "compare", "", run_values(old_m), None, {}, policy.rule(None), args.tolerance
    )
    planned = {name: sorted(m.by_concurrency()) for name, m in old_m.items()}
    verdicts = policy.judge(new_m, recorded.baseline, planned)
    header = f"{'figure':34} | {'old':>10} | {'new':>10} | {'tol':>6} | {'Δ%':>7} | verdict"
    print(header)
    print("-" * len(header))
    for check in verdicts.checks:
        old_value = "-" if check.baseline is None else f"{check.baseline:.4g}"
        new_value = "-" if check.measured is None else f"{check.measured:.4g}"
        tol = "-" if check.tolerance is None else f"{check.tolerance:.1%}"
        delta = delta_text(check.delta_pct)
        print(
            f"{check.key:34} | {old_value:>10} | {new_value:>10} | {tol:>6} | {delta:>7} | "
            f"{check.verdict.upper()}" + (f" ({check.why})" if check.failed else "")
        )
    failed = verdicts.failed
    _print_fact_diff(old, new, failed)
    if failed:
        print(f"{len(failed)} figures regressed or missing in NEW")
        return 1
    print("no regression")
    return 0


def _print_fact_diff(old: RunRecord, new: RunRecord, failed: list[Check]) -> None:
    """The configuration facts that differ between the runs, and (when figures failed)
    the likely causes ranked."""
    print()
    if not old.facts or not new.facts:
        missing = " and ".join(n for n, r in (("OLD", old), ("NEW", new)) if not r.facts)
        print(f"no configuration facts in {missing} (runs of older perfgate versions have none)")
        return
    why = diagnose(new.facts, old.facts, failed)
    if not why.changes:
        print("configuration facts: no difference")
    else:
        print("configuration facts that differ (OLD → NEW):")
        for change in why.changes:
            print(f"  {change.describe()}")
    if why.unknown:
        print(f"facts not known for NEW (not reported): {', '.join(why.unknown)}")
    if failed and why.causes:
        print("likely causes, most likely first:")
        for i, cause in enumerate(why.causes, 1):
            print(f"  {i}. {cause.text}")


def cmd_report(args: argparse.Namespace) -> int:
    """``perfgate report``: a run JSON's report, recomputed from its records."""
    run = load_run(Path(args.run_json))
    name, output = args.format or "text", args.output
    if args.csv is not None:  # --csv [PATH]: the csv format
        name, output = "csv", (None if args.csv == "-" else args.csv)
    elif args.markdown:
        name = "markdown"
    fmt = formats()[name]
    context = Context(args.run_json, args.artifact_url, root=Path.cwd())
    if fmt.files is not None:  # files of its own (plots): next to the run JSON, or in --output
        path = Path(args.run_json)
        written = fmt.write(run, Path(output) / path.name if output else path, context)
        for file in written:
            print(file)
        if not written:
            print(f"no {name}: {fmt.nothing}")
        return 0
    text = fmt.text(run, context)
    if output is None:
        sys.stdout.write(text)
    else:
        Path(output).write_text(text)
        print(f"{name} report written to {output}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """``perfgate history``: a profile's figures over its runs (and their plot)."""
    path = history_path(Path(args.history_dir), args.profile)
    entries = load_history(path)
    if not entries:
        print(
            f"no history for {args.profile}: nothing in {path}. Each finished "
            f"`perfgate run {args.profile}` run appends its figures there "
            "(keep the directory between CI jobs: cache or commit it)."
        )
        return 1
    hardware = args.hardware or entries[-1].hardware_key
    runs = [e for e in entries if e.hardware_key == hardware]
    others = sorted({str(e.hardware_key) for e in entries if e.hardware_key != hardware})
    if not runs:
        print(f"no run of {args.profile} on {hardware} in {path}; it has: {', '.join(others)}")
        return 1
    keys = select_keys(runs, args.figure) if args.figure else None
    also = f"; also in it: {', '.join(others)} (pick with --hardware)" if others else ""
    print(f"{path}: {args.profile} on {hardware}, {len(runs)} runs{also}")
    print(render_history(runs, keys))
    if args.plot:
        margin = None
        try:
            gate = load_profile(args.profile, Path(args.profiles_dir)).gate
            margin = gate.creep_margin if gate.creep_runs else None
        except PerfgateError:
            pass  # the history stands without its profile; the plot just has no margin
        out = plot_history(runs, Path(args.plot), keys, margin=margin)
        print(f"plot written to {out}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """``perfgate plot``: write a run JSON's PNG plots."""
    from perfgate.render.plots.charts import render_run_plots
    from perfgate.render.plots.common import load_baseline_run, run_failed, run_stem

    path = Path(args.run_json)
    run = load_run(path)
    out = Path(args.out) if args.out else path.parent
    baseline_run = None
    if args.baseline_run:
        baseline_run = load_run(Path(args.baseline_run))
    elif run_failed(run):
        baseline_run = load_baseline_run(run, Path(args.root))
        if baseline_run is None:
            kept = run.baseline.run_json if run.baseline else None
            print(
                "no vs-baseline plot: "
                + (f"{kept} not found under {args.root}" if kept else "the run names no kept run")
                + " (give one with --baseline-run)",
                file=sys.stderr,
            )
    for written in render_run_plots(run, out, run_stem(path), baseline_run=baseline_run):
        print(written)
    return 0
