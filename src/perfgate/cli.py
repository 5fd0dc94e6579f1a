"""``perfgate`` command: gate a profile, list profiles, show baselines, re-render a run."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
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
from perfgate.render.history import plot_history, render_history, select_keys
from perfgate.render.markdown import markdown_summary
from perfgate.render.table import csv_text, render_table
from perfgate.results.history import DEFAULT_HISTORY_DIR, history_path, load_history
from perfgate.results.run import RunRecord, load_run


def _profiles(args: argparse.Namespace) -> int:
    directory = Path(args.profiles_dir)
    for name in available_profiles(directory):
        profile = load_profile(name, directory)
        print(f"{name:32} {profile.engine:9} {profile.hardware:12} {profile.description}")
    return 0


def _baseline_rederive(args: argparse.Namespace) -> int:
    """Derive a profile's tolerances and detectable drops again from each exact
    baseline's kept run JSON, with this perfgate's rules; values, hand-set tolerances,
    floors, host spreads and facts stay as they are."""
    from datetime import UTC, datetime

    from perfgate import __version__
    from perfgate.gate.baseline import ANY_HARDWARE, baseline_path, save_baseline
    from perfgate.gate.recording import diff_lines
    from perfgate.run.session import gate_policy

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


def _baseline_show(args: argparse.Namespace) -> int:
    baselines = load_profile_baselines(Path(args.baselines_dir), args.profile)
    if not baselines:
        print(
            f"no baseline for {args.profile} under {args.baselines_dir}/; record one with "
            f"`perfgate run {args.profile} --perf-update-baselines`"
        )
        return 1
    for hardware, baseline in baselines.items():
        print(f"{args.baselines_dir}/{args.profile}/{hardware}.json")
        for key, value in sorted(baseline.provenance.items()):
            print(f"  {key}: {value}")
        for key, exp in baseline.metrics.items():
            print(
                f"  {key:36} {exp.value:>10.4g} {exp.unit:6} ±{exp.tolerance:.1%} "
                f"{exp.tolerance_source:8} ({exp.direction} is better"
                + (f", noise {exp.noise_sigma:.1%} over {exp.runs} runs" if exp.noise_sigma else "")
                + (f"; catches a drop of {exp.detectable:.0%}" if exp.detectable else "")
                + ")"
            )
    return 0


def _compare(args: argparse.Namespace) -> int:
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


def _report(args: argparse.Namespace) -> int:
    run = load_run(Path(args.run_json))
    if args.csv is not None:
        text = csv_text(run)
        if args.csv == "-":
            sys.stdout.write(text)
        else:
            Path(args.csv).write_text(text)
            print(f"CSV written to {args.csv}")
        return 0
    if args.markdown:
        sys.stdout.write(
            markdown_summary(run, run_json=args.run_json, artifact_url=args.artifact_url)
        )
        return 0
    print(
        f"{args.run_json}: profile {run.profile.get('name')}, {run.engine} "
        f"{run.engine_version}, status {run.status}"
    )
    for name, measurement in run.measurements.items():
        records = sum(len(lv.records) for lv in measurement.levels)
        print(f"[{name}] (metrics recomputed from {records} raw records)")
        print(render_table(name, measurement.recomputed(), None))
    return 0


def _history(args: argparse.Namespace) -> int:
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


def _plot(args: argparse.Namespace) -> int:
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


def _fleet(args: argparse.Namespace) -> int:
    from perfgate.fleet import import_ray, run_fleet
    from perfgate.render.fleet import fleet_table

    directory = Path(args.profiles_dir)
    profiles = [(ref, load_profile(ref, directory)) for ref in args.profiles]
    names = [p.name for _, p in profiles]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise PerfgateError(f"profiles given twice: {', '.join(dupes)}")
    import_ray()  # before anything starts: the install hint if Ray is absent
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    output = Path(args.output).resolve()

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    result = run_fleet(
        args.address,
        profiles,
        root=Path(args.root).resolve(),
        output_dir=output,
        pytest_args=extra,
        timeout_s=args.timeout,
        progress=lambda line: print(line, flush=True),
    )
    print("\n".join(fleet_table(result)))
    print(f"perfgate fleet: summary written to {output / 'fleet.md'} and {output / 'fleet.json'}")
    if not result.passed:
        bad = [e for e in result.entries if e.status != "passed"]
        print(
            f"perfgate fleet: FAILED: {len(bad)} of {len(result.entries)} profiles did not pass: "
            + ", ".join(f"{e.profile} ({e.status})" for e in bad)
        )
        return 1
    print(f"perfgate fleet: passed: all {len(result.entries)} profiles")
    return 0


RUN_USAGE = """usage: perfgate run [PROFILE] [PYTEST_ARGS ...]

Gate PROFILE (profiles/PROFILE.toml here, or a TOML path; default: the only profile in
profiles/): perfgate's correctness suite, then its performance suite, judged against
baselines/. Baselines, run JSON (.perfgate/) and the history are written in this directory.
The same as: pytest --pyargs perfgate.suites -m perf --perf-profile PROFILE [PYTEST_ARGS]

examples:
  perfgate run mine --perf-base-url http://127.0.0.1:8000 --perf-update-baselines
  perfgate run mine --perf-base-url http://127.0.0.1:8000
exit codes: 0 passed, 1 regressed or failed, 10 too noisy, 11 missing baseline or figure,
12 a correctness check failed (docs/verdicts.md, "Exit codes")"""


def run_command(args: Sequence[str], here: Path) -> list[str]:
    """The pytest command line that ``perfgate run ARGS`` executes from ``here``."""
    command = [sys.executable, "-m", "pytest", "--pyargs", "perfgate.suites", "-m", "perf"]
    rest = list(args)
    if rest and not rest[0].startswith("-"):
        command.append(f"--perf-profile={rest.pop(0)}")
    if (here / "profiles").is_dir() and not any(a.startswith("--rootdir") for a in rest):
        command.append(f"--rootdir={here}")  # this directory's profiles, not a parent's
    return command + rest


def _run(args: Sequence[str]) -> int:
    """``perfgate run``: pytest takes over this process (its exit code, its signals)."""
    if args[:1] in (["-h"], ["--help"]):
        print(RUN_USAGE)
        return 0
    command = run_command(args, Path.cwd())
    sys.stdout.flush()
    os.execv(command[0], command)


def _import(args: argparse.Namespace) -> int:
    """Peers' result files as one perfgate run JSON (and, asked, a profile's baseline)."""
    from perfgate.importing import imported_run

    paths = [Path(p) for p in args.files]
    name = args.profile or args.name or paths[0].stem
    run = imported_run(paths, name, args.format, args.concurrency, args.hardware or "")
    out = Path(args.out) if args.out else paths[0].with_name(f"{paths[0].stem}.perfgate.json")
    run.write(out)
    for kind, measurement in run.measurements.items():
        for level, runs in measurement.by_concurrency().items():
            m = runs[-1].metrics
            print(
                f"  {kind} {level}: {len(runs)} run(s); last: {m.ok} ok, {m.fail} failed, "
                f"agg {m.agg_tok_s:.2f} tok/s, TTFT p50 {m.ttft_s.p50 or 0:.4f} s"
            )
    print(f"perfgate import: run JSON written to {out} (perfgate report/compare read it)")
    if args.update_baselines:
        return _record_imported(args, run, out)
    return 0


def _record_imported(args: argparse.Namespace, run: RunRecord, out: Path) -> int:
    """Record the imported run as ``--profile``'s baseline for ``--hardware``."""
    from perfgate import __version__
    from perfgate.gate.baseline import baseline_path, save_baseline
    from perfgate.launch.hardware import describe_local_hardware
    from perfgate.run.session import gate_policy

    if not args.profile:
        print("perfgate import: --update-baselines needs --profile NAME", file=sys.stderr)
        return 2
    profile = load_profile(args.profile, Path(args.profiles_dir))
    local = describe_local_hardware()  # the imported server is taken to have run here,
    # unless --hardware names another host's key
    hardware = args.hardware or str(local.get("key") or profile.hardware)
    host_id = "" if args.hardware else str(local.get("host_id") or "")
    path = baseline_path(Path(args.baselines_dir), profile.name, hardware)
    kept = path.with_suffix(".run.json.gz")
    previous = load_profile_baselines(Path(args.baselines_dir), profile.name).get(hardware)
    policy = gate_policy(profile, profile.gate.record_repeats, recording=True)
    recorded = build_baseline(
        profile.name,
        hardware,
        run_values(run.measurements, policy.chosen(previous)),
        previous,
        rule=policy.rule(None),
        min_tolerance=profile.gate.min_tolerance,
        host_id=host_id,
        provenance={
            "perfgate_version": __version__,
            "imported_from": [str(p) for p in args.files],
            "engine": run.engine,
            "model": profile.model.name,
            "hardware": {"key": hardware},
            "run_json": str(kept),
        },
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    run.write_compressed(kept)
    save_baseline(path, recorded.baseline)
    print(f"perfgate import: baseline written to {path} ({len(recorded.baseline.metrics)} figures)")
    return 0


def _init(args: argparse.Namespace) -> int:
    """Ask the server at --perf-base-url what it is; write a profile for it."""
    from perfgate.discover import probe_server, write_profile

    headers = {}
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            print(f"perfgate init: ${args.api_key_env} is not set (--api-key-env)", file=sys.stderr)
            return 2
        headers["Authorization"] = f"Bearer {key}"
    facts = probe_server(args.perf_base_url, headers)
    path = write_profile(
        facts, Path(args.profiles_dir), args.name, args.api_key_env, force=args.force
    )
    told = ", ".join(f"{what} from {where}" for what, where in facts.sources.items())
    print(f"perfgate init: wrote {path}: {facts.engine} {facts.version}, model {facts.model}")
    print(f"  told by the server: {told}")
    for item in facts.unknown:
        print(f"  FILL IN: {item}")
    print("  check the lines marked FILL IN, then record a baseline:")
    print(f"  perfgate run {path.stem} --perf-base-url {facts.base_url} --perf-update-baselines")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="perfgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "run",
        help="gate a profile from this directory: both suites, against baselines/ "
        "(perfgate run --help)",
        add_help=False,
    )
    i = sub.add_parser(
        "init", help="write a profile for a running server, from what it tells about itself"
    )
    i.add_argument("--perf-base-url", required=True, metavar="URL", help="the running server")
    i.add_argument("--name", help="the profile's name (default: ENGINE-MODEL)")
    i.add_argument("--profiles-dir", default="profiles")
    i.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="the environment variable that holds the server's API key",
    )
    i.add_argument("--force", action="store_true", help="replace an existing profile")
    i.set_defaults(func=_init)
    im = sub.add_parser(
        "import",
        help="peers' results as perfgate run JSON: `vllm bench serve --save-result "
        "--save-detailed` JSON, AIPerf's profile_export.jsonl (several files: several runs)",
    )
    im.add_argument("files", nargs="+", metavar="FILE")
    im.add_argument("--out", help="the run JSON to write (default FILE.perfgate.json)")
    im.add_argument("--format", choices=["vllm", "aiperf"], help="default: from the content")
    im.add_argument("--name", help="the run's profile name (default --profile, else FILE)")
    im.add_argument(
        "--concurrency",
        type=int,
        help="AIPerf: the concurrency it ran at (default: the most requests in flight at once)",
    )
    im.add_argument("--profile", help="with --update-baselines: the profile to record for")
    im.add_argument(
        "--update-baselines",
        action="store_true",
        help="record the imported runs as the profile's baseline for --hardware",
    )
    im.add_argument("--hardware", help="the hardware key (default: this machine's)")
    im.add_argument("--profiles-dir", default="profiles")
    im.add_argument("--baselines-dir", default="baselines")
    im.set_defaults(func=_import)
    p = sub.add_parser("profiles", help="list the profiles")
    p.add_argument("--profiles-dir", default="profiles")
    p.set_defaults(func=_profiles)
    b = sub.add_parser("baseline", help="baseline commands")
    bsub = b.add_subparsers(dest="baseline_command", required=True)
    show = bsub.add_parser("show", help="print a profile's baseline")
    show.add_argument("profile")
    show.add_argument("--baselines-dir", default="baselines")
    show.set_defaults(func=_baseline_show)
    rederive = bsub.add_parser(
        "rederive",
        help="derive tolerances and detectable drops again from the kept run JSON",
    )
    rederive.add_argument("profile")
    rederive.add_argument("--baselines-dir", default="baselines")
    rederive.add_argument("--profiles-dir", default="profiles")
    rederive.set_defaults(func=_baseline_rederive)
    c = sub.add_parser(
        "compare", help="gate NEW against OLD (two run JSON files); exit 1 on a regression"
    )
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="relative tolerance for every figure (default: derived from OLD's run-to-run "
        "noise, as --perf-update-baselines derives it; OLD needs at least 2 runs a level)",
    )
    c.set_defaults(func=_compare)
    r = sub.add_parser("report", help="print the tables of a run JSON, recomputed from its records")
    r.add_argument("run_json")
    r.add_argument(
        "--csv",
        nargs="?",
        const="-",
        metavar="PATH",
        help="the tables as CSV instead (one row per level; to PATH, or stdout without one)",
    )
    r.add_argument(
        "--markdown",
        action="store_true",
        help="the Markdown summary instead (as written to $GITHUB_STEP_SUMMARY)",
    )
    r.add_argument("--artifact-url", help="with --markdown: link where CI uploaded the files")
    r.set_defaults(func=_report)
    pl = sub.add_parser(
        "plot",
        help="write PNG plots of a run JSON (throughput, latency, latency distribution; "
        "a failed run also against its baseline's recorded run)",
    )
    pl.add_argument("run_json")
    pl.add_argument("--out", default=None, help="directory for the PNGs (default: the run's)")
    pl.add_argument(
        "--baseline-run",
        default=None,
        help="a run JSON to plot this run against (default, for a failed run: the run its "
        "baseline was recorded from)",
    )
    pl.add_argument(
        "--root", default=".", help="project root the run's baseline paths are relative to"
    )
    pl.set_defaults(func=_plot)
    h = sub.add_parser("history", help="print (and plot) a profile's figures over its runs")
    h.add_argument("profile")
    h.add_argument(
        "--history-dir",
        default=str(DEFAULT_HISTORY_DIR),
        help="where the run history lives (default %(default)s)",
    )
    h.add_argument(
        "--figure",
        action="extend",
        nargs="+",
        metavar="KEY",
        help="figures to show: keys or globs, e.g. 'sweep.*.agg_tok_s' (default: all)",
    )
    h.add_argument("--hardware", help="hardware key to show (default: the latest run's)")
    h.add_argument("--plot", metavar="OUT.png", help="also write a PNG of the trends")
    h.add_argument("--profiles-dir", default="profiles", help="to read the profile's creep margin")
    h.set_defaults(func=_history)
    f = sub.add_parser(
        "fleet",
        help="gate profiles on a Ray cluster, each on a node offering what its [fleet] table "
        "asks for; exit 1 unless every profile passed",
    )
    f.add_argument("--address", required=True, help="the Ray cluster: its head's host:port")
    f.add_argument(
        "--profile",
        dest="profiles",
        action="append",
        required=True,
        metavar="NAME_OR_PATH",
        help="a profile to gate (repeat for more)",
    )
    f.add_argument("--profiles-dir", default="profiles")
    f.add_argument(
        "--root", default=".", help="the project checkout, at this same path on every node"
    )
    f.add_argument(
        "--output", default=".perfgate/fleet", help="where logs, run JSON and the summary go"
    )
    f.add_argument(
        "--timeout", type=float, default=None, help="seconds before unfinished gates are cancelled"
    )
    f.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        help="after --: more arguments for each gate's pytest (e.g. -- --perf-repeats 5)",
    )
    f.set_defaults(func=_fleet)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        return _run(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (PerfgateError, OSError, ValueError) as exc:
        print(f"perfgate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
