"""``perfgate`` command: list profiles, show baselines, re-render a run from its JSON."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate.baseline import load_baseline
from perfgate.errors import PerfgateError
from perfgate.profile import available_profiles, load_profile
from perfgate.report import load_run, render_table


def _profiles(args: argparse.Namespace) -> int:
    directory = Path(args.profiles_dir)
    for name in available_profiles(directory):
        profile = load_profile(name, directory)
        print(f"{name:32} {profile.engine:9} {profile.hardware:12} {profile.description}")
    return 0


def _baseline_show(args: argparse.Namespace) -> int:
    path = Path(args.baselines_dir) / f"{args.profile}.json"
    baseline = load_baseline(path)
    if baseline is None:
        print(f"no baseline at {path}; record one with `pytest -m perf --update-baselines`")
        return 1
    print(f"{path} (profile {baseline.profile}, hardware {baseline.hardware})")
    for key, value in sorted(baseline.provenance.items()):
        print(f"  {key}: {value}")
    for key, exp in baseline.metrics.items():
        print(
            f"  {key:36} {exp.value:>10.4g} {exp.unit:6} ±{exp.tolerance:.0%} "
            f"({exp.direction} is better)"
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    run = load_run(Path(args.run_json))
    print(
        f"{args.run_json}: profile {run.profile.get('name')}, {run.engine} "
        f"{run.engine_version}, status {run.status}"
    )
    for name, measurement in run.measurements.items():
        records = sum(len(lv.records) for lv in measurement.levels)
        print(f"[{name}] (metrics recomputed from {records} raw records)")
        print(
            render_table(
                name, [lv.recomputed() for lv in measurement.levels], None, measurement.not_run
            )
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="perfgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("profiles", help="list the profiles")
    p.add_argument("--profiles-dir", default="profiles")
    p.set_defaults(func=_profiles)
    b = sub.add_parser("baseline", help="baseline commands")
    bsub = b.add_subparsers(dest="baseline_command", required=True)
    show = bsub.add_parser("show", help="print a profile's baseline")
    show.add_argument("profile")
    show.add_argument("--baselines-dir", default="baselines")
    show.set_defaults(func=_baseline_show)
    r = sub.add_parser("report", help="print the tables of a run JSON, recomputed from its records")
    r.add_argument("run_json")
    r.set_defaults(func=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (PerfgateError, OSError, ValueError) as exc:
        print(f"perfgate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
