"""``perfgate`` command: gate a profile, list profiles, show baselines, re-render a run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from perfgate.cli.ab import add_parser as add_ab_parser
from perfgate.cli.project import cmd_fleet, cmd_import, cmd_init, cmd_run
from perfgate.cli.reports import (
    cmd_baseline_rederive,
    cmd_baseline_show,
    cmd_compare,
    cmd_history,
    cmd_plot,
    cmd_profiles,
    cmd_report,
)
from perfgate.errors import PerfgateError
from perfgate.render.formats import formats
from perfgate.results.history import DEFAULT_HISTORY_DIR


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
    i.set_defaults(func=cmd_init)
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
    im.set_defaults(func=cmd_import)
    p = sub.add_parser("profiles", help="list the profiles")
    p.add_argument("--profiles-dir", default="profiles")
    p.set_defaults(func=cmd_profiles)
    b = sub.add_parser("baseline", help="baseline commands")
    bsub = b.add_subparsers(dest="baseline_command", required=True)
    show = bsub.add_parser("show", help="print a profile's baseline")
    show.add_argument("profile")
    show.add_argument("--baselines-dir", default="baselines")
    show.add_argument(
        "--profiles-dir",
        default="profiles",
        help="the profile's [gate] runs and rate size what each tolerance can promise "
        "(defaults where the profile is not found)",
    )
    show.set_defaults(func=cmd_baseline_show)
    rederive = bsub.add_parser(
        "rederive",
        help="derive tolerances and detectable drops again from the kept run JSON",
    )
    rederive.add_argument("profile")
    rederive.add_argument("--baselines-dir", default="baselines")
    rederive.add_argument("--profiles-dir", default="profiles")
    rederive.set_defaults(func=cmd_baseline_rederive)
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
    c.set_defaults(func=cmd_compare)
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
    r.add_argument(
        "--format",
        choices=sorted(formats()),
        help="the report's format (render/formats/: "
        + "; ".join(f"{f.name}: {f.help}" for f in formats().values())
        + ")",
    )
    r.add_argument("--output", metavar="PATH", help="write the report to PATH, not stdout")
    r.add_argument("--artifact-url", help="with --markdown: link where CI uploaded the files")
    r.set_defaults(func=cmd_report)
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
    pl.set_defaults(func=cmd_plot)
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
    h.set_defaults(func=cmd_history)
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
    f.set_defaults(func=cmd_fleet)
    add_ab_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        return cmd_run(argv[1:])
    passed_on: list[str] = []  # `perfgate ab A B ... -- PYTEST_ARGS`: pytest's own
    if argv[:1] == ["ab"] and "--" in argv:
        argv, passed_on = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = build_parser().parse_args(argv)
    if argv[:1] == ["ab"]:
        args.pytest_args = passed_on
    try:
        return int(args.func(args))
    except (PerfgateError, OSError, ValueError) as exc:
        print(f"perfgate: {exc}", file=sys.stderr)
        return 2
