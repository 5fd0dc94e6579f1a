"""Commands that gate: ``run`` (pytest on the installed suites), ``init`` (a profile from a
running server), ``import`` (a peer tool's results) and ``fleet``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.gate.baseline import load_profile_baselines
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import run_values
from perfgate.profile import load_profile
from perfgate.results.run import RunRecord


def cmd_fleet(args: argparse.Namespace) -> int:
    """``perfgate fleet``: gate profiles on a Ray cluster; print the fleet's table."""
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


def cmd_run(args: Sequence[str]) -> int:
    """``perfgate run``: pytest takes over this process (its exit code, its signals)."""
    if args[:1] in (["-h"], ["--help"]):
        print(RUN_USAGE)
        return 0
    command = run_command(args, Path.cwd())
    sys.stdout.flush()
    os.execv(command[0], command)


def cmd_import(args: argparse.Namespace) -> int:
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
    from perfgate.run.settings import gate_policy

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


def cmd_init(args: argparse.Namespace) -> int:
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
