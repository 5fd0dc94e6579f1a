"""``perfgate`` command: gate a profile, list profiles, show baselines, re-render a run.

One module per kind of command (:mod:`.reports`, :mod:`.project`); :mod:`.main` holds the
parser and the entry point.
"""

from perfgate.cli.main import build_parser, main
from perfgate.cli.project import run_command

__all__ = ["build_parser", "main", "run_command"]
