"""``perfgate ab A B``: gate B, the candidate, against A, the reference, side by side."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from perfgate.errors import PerfgateError
from perfgate.profile import load_profile
from perfgate.run.ab import USAGE, ABOptions, ABRun, ReferenceUnavailable
from perfgate.run.session import PerfgateSession


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``ab`` subcommand's arguments."""
    ab = sub.add_parser(
        "ab",
        help="gate B against A side by side on this host: both servers up, runs interleaved "
        "A B B A, a paired verdict (no baseline file)",
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
    ab.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    ab.add_argument("--profiles-dir", default="profiles")
    ab.add_argument("--output", default=".perfgate", help="where the run JSON goes")
    ab.set_defaults(func=cmd_ab)


def _interrupt(signum: int, _: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def cmd_ab(args: argparse.Namespace) -> int:
    """Both sides started (or attached), measured ABBA, judged pair by pair; the exit code
    of ``pytest -m perf`` (0 passed, 1 regressed, 10 too noisy), 4 when A cannot run."""
    root, profiles = Path.cwd(), Path(args.profiles_dir)
    output = Path(args.output)
    sessions = [
        PerfgateSession(
            load_profile(name, profiles),
            root=root,
            baselines_dir=root / "baselines",
            output_dir=output,
            base_url=url,
            options=None,
        )
        for name, url in ((args.a, args.a_base_url), (args.b, args.b_base_url))
    ]
    options = ABOptions(
        tolerance=args.tolerance,
        allow_model_change=args.allow_model_change,
        min_pairs=args.min_pairs,
        max_pairs=args.max_pairs,
    )
    a, b = sessions
    run = ABRun(a, b, options)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)  # so both servers get stopped
    try:
        run.measure()
    except ReferenceUnavailable as exc:
        for session in sessions:
            session.stop_backend()
        print(f"perfgate: {exc}", file=sys.stderr)
        return USAGE
    except (KeyboardInterrupt, PerfgateError):
        for session in sessions:
            session.stop_backend()
        raise
    outcome = run.conclude(plots=not args.no_plots)
    print("\n".join(outcome.lines))
    return outcome.exit_code
