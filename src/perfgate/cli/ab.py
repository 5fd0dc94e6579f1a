"""``perfgate ab A B``: gate B, the candidate, against A, the reference, side by side.

The same run as ``perfgate run B --perf-ab A`` (pytest takes over this process): both
sides answer the correctness suite, then the levels run A B B A under the paired verdict."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from perfgate.cli.project import run_command

# this command's flags, and the pytest options they become
AS_PYTEST = {
    "a_base_url": "--perf-ab-base-url",
    "b_base_url": "--perf-base-url",
    "tolerance": "--perf-ab-tolerance",
    "min_pairs": "--perf-ab-min-pairs",
    "max_pairs": "--perf-ab-max-pairs",
    "output": "--perf-output",
}
SWITCHES = {
    "allow_model_change": "--perf-ab-allow-model-change",
    "alternate": "--perf-ab-alternate",
    "no_plots": "--perf-no-plots",
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``ab`` subcommand's arguments."""
    ab = sub.add_parser(
        "ab",
        help="gate B against A side by side on this host: both answer the correctness "
        "suite, runs interleaved A B B A, a paired verdict (no baseline file)",
        description="The same as: perfgate run B --perf-ab A [PYTEST_ARGS]. Exit codes as "
        "pytest -m perf's (0 passed, 1 regressed, 10 too noisy, 12 a correctness check "
        "failed), 4 when A (the reference) cannot run or answers wrongly.",
    )
    ab.add_argument("a", metavar="A", help="the reference: a profile name or path")
    ab.add_argument("b", metavar="B", help="the candidate: a profile name or path")
    ab.add_argument("--a-base-url", metavar="URL", help="attach to A running here")
    ab.add_argument("--b-base-url", metavar="URL", help="attach to B running here")
    ab.add_argument(
        "--tolerance",
        type=float,
        help="how much worse B may be than A, e.g. 0.1: 10%% (default: B's profile's "
        "[ab] tolerance, 0.1)",
    )
    ab.add_argument("--min-pairs", type=int, help="pairs a level before a pass ([ab], 8)")
    ab.add_argument("--max-pairs", type=int, help="the most pairs a level ([ab], 200)")
    ab.add_argument(
        "--allow-model-change",
        action="store_true",
        help="compare profiles that differ in model or workload",
    )
    ab.add_argument(
        "--alternate",
        action="store_true",
        help="A and B do not both fit: alternate whole server lifetimes, A, B, A, ... "
        "(default: B's profile's [ab] colocate)",
    )
    ab.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    ab.add_argument(
        "--profiles-dir", default="profiles", help="where A and B are looked up by name"
    )
    ab.add_argument("--output", help="where the run JSON goes (default .perfgate)")
    ab.set_defaults(func=cmd_ab, pytest_args=[])
    ab.epilog = "after --: more pytest arguments, e.g. perfgate ab old new -- -k sweep"


def profile_argument(name: str, profiles_dir: Path) -> str:
    """A profile named on the command line, as pytest's --perf-profile takes it: a name
    found in ``profiles_dir`` becomes its path (pytest looks in the rootdir's profiles/)."""
    found = profiles_dir / f"{name}.toml"
    return str(found.resolve()) if not name.endswith(".toml") and found.is_file() else name


def ab_command(args: argparse.Namespace, here: Path) -> list[str]:
    """The pytest command line that ``perfgate ab`` executes."""
    profiles = Path(args.profiles_dir)
    rest = [profile_argument(args.b, profiles), f"--perf-ab={profile_argument(args.a, profiles)}"]
    for field, option in AS_PYTEST.items():
        if (value := getattr(args, field)) is not None:
            rest.append(f"{option}={value}")
    rest += [option for field, option in SWITCHES.items() if getattr(args, field)]
    return run_command(rest + list(args.pytest_args), here)


def cmd_ab(args: argparse.Namespace) -> int:
    """pytest takes over this process (its exit code, its signals)."""
    command = ab_command(args, Path.cwd())
    sys.stdout.flush()
    os.execv(command[0], command)
