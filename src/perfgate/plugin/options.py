"""perfgate's pytest options and ini settings, and the run settings read from them."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Literal

import pytest

from perfgate.profile import DEFAULT_PROFILE
from perfgate.render.live import Mode, ProgressView
from perfgate.run.settings import GateOptions


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "perfgate: performance regression gate")
    group.addoption(
        "--perf-profile",
        dest="perfgate_profile",
        default=None,
        metavar="NAME",
        help=f"profile name in profiles/ or a TOML path (default {DEFAULT_PROFILE}, or the "
        "only profile in profiles/)",
    )
    group.addoption(
        "--perf-base-url",
        dest="perfgate_base_url",
        default=None,
        metavar="URL",
        help="attach to a running server instead of launching the profile's",
    )
    group.addoption(
        "--perf-server-log",
        dest="perfgate_server_log",
        default=None,
        metavar="PATH",
        help="with --perf-base-url: the attached server's log file, read for diagnosis",
    )
    group.addoption(
        "--perf-ab",
        dest="perfgate_ab",
        default=None,
        metavar="PROFILE",
        help="a side-by-side run: gate --perf-profile (B) against this profile (A) on this "
        "host, runs interleaved A B B A, a paired verdict; no baseline file (the sweep)",
    )
    group.addoption(
        "--perf-ab-base-url",
        dest="perfgate_ab_base_url",
        default=None,
        metavar="URL",
        help="with --perf-ab: attach to A running here",
    )
    group.addoption(
        "--perf-ab-tolerance",
        dest="perfgate_ab_tolerance",
        type=float,
        default=None,
        metavar="F",
        help="with --perf-ab: how much worse B may be than A (default: the profile's [ab] "
        "tolerance, 0.1: 10%%)",
    )
    group.addoption(
        "--perf-ab-min-pairs",
        dest="perfgate_ab_min_pairs",
        type=int,
        default=None,
        metavar="N",
        help="with --perf-ab: the fewest pairs of runs a level before a pass (default: "
        "[ab] min_pairs, 8)",
    )
    group.addoption(
        "--perf-ab-max-pairs",
        dest="perfgate_ab_max_pairs",
        type=int,
        default=None,
        metavar="N",
        help="with --perf-ab: the most pairs of runs a level (default: [ab] max_pairs, 200)",
    )
    group.addoption(
        "--perf-ab-alternate",
        dest="perfgate_ab_alternate",
        action="store_true",
        default=None,
        help="with --perf-ab: A and B do not both fit; alternate whole server lifetimes "
        "(default: the profile's [ab] colocate)",
    )
    group.addoption(
        "--perf-ab-allow-model-change",
        dest="perfgate_ab_allow_model_change",
        action="store_true",
        help="with --perf-ab: compare profiles that differ in model or workload",
    )
    group.addoption(
        "--perf-update-baselines",
        dest="perfgate_update",
        action="store_true",
        help="write baselines/<profile>/<hardware>.json from this run (if it passed)",
    )
    group.addoption(
        "--perf-output",
        dest="perfgate_output",
        default=None,
        metavar="DIR",
        help="where run JSON and server logs go (default .perfgate/)",
    )
    group.addoption(
        "--perf-repeats",
        dest="perfgate_repeats",
        type=int,
        default=None,
        metavar="N",
        help="runs of each sweep level (default: the profile's gate.repeats)",
    )
    group.addoption(
        "--perf-abort-below",
        dest="perfgate_abort_below",
        type=float,
        default=None,
        metavar="F",
        help="stop a sweep when a level's tok/s is below F x baseline (0 = never; "
        "default: the profile's gate.abort_below)",
    )
    group.addoption(
        "--perf-tolerance",
        dest="perfgate_tolerance",
        type=float,
        default=None,
        metavar="F",
        help="with --perf-update-baselines: every figure's relative tolerance (default: keep)",
    )
    group.addoption(
        "--perf-hardware",
        dest="perfgate_hardware",
        default=None,
        metavar="KEY",
        help="the serving host's hardware key, for a remote server attached with --perf-base-url "
        "(default: detected on the serving host; for a remote one, the profile's label)",
    )
    group.addoption(
        "--perf-allow-no-baseline",
        dest="perfgate_allow_no_baseline",
        action="store_true",
        default=None,
        help="skip, instead of failing, the perf tests where no baseline applies "
        "(exploratory runs; ini: perfgate_allow_no_baseline)",
    )
    group.addoption(
        "--perf-accept-golden",
        dest="perfgate_accept_golden",
        action="store_true",
        default=False,
        help="with --perf-update-baselines: record golden greedy outputs that changed (their diff "
        "is printed); without it, changed answers fail the run and nothing is recorded",
    )
    group.addoption(
        "--perf-summary",
        dest="perfgate_summary",
        default=None,
        metavar="PATH",
        help="append the run's Markdown summary to PATH (it also goes to $GITHUB_STEP_SUMMARY "
        "when that is set)",
    )
    group.addoption(
        "--perf-history",
        dest="perfgate_history",
        default=None,
        metavar="DIR",
        help="the history directory: each gated run appends its figures to "
        "DIR/<profile>.jsonl, which the slow-creep rule reads (default: <--perf-output>/history)",
    )
    group.addoption(
        "--perf-report",
        dest="perfgate_report",
        action="append",
        default=[],
        metavar="FORMAT",
        help="also write the run's report in FORMAT next to the run JSON (repeatable; "
        "the formats of `perfgate report --format`: csv, junit, markdown, plots, text, and "
        "any registered; plots are written by default)",
    )
    group.addoption(
        "--perf-no-plots",
        dest="perfgate_no_plots",
        action="store_true",
        default=False,
        help="write no PNG plots next to the run JSON (default: the plots format, when "
        "matplotlib is installed: pip install 'perfgate[plots]')",
    )
    parser.addini(
        "perfgate_allow_no_baseline",
        "skip instead of failing where no baseline applies",
        type="bool",
        default=False,
    )
    parser.addini(
        "perfgate_profile",
        f"default profile (else {DEFAULT_PROFILE} where profiles/ has it, else its only one)",
        default="",
    )
    parser.addini("perfgate_profiles_dir", "profiles directory", default="profiles")
    parser.addini("perfgate_baselines_dir", "baselines directory", default="baselines")
    for name, (help_text, kind) in INI_SETTINGS.items():
        parser.addini(name, help_text, type=kind, default=False if kind == "bool" else None)


# The options that describe a project's setup, settable in its pytest configuration too
# (the command line wins). One-off actions (recording, tolerances) are command-line only.
INI_SETTINGS: dict[str, tuple[str, Literal["string", "bool"]]] = {
    "perfgate_base_url": ("attach to this running server (as --perf-base-url)", "string"),
    "perfgate_server_log": ("the attached server's log file (as --perf-server-log)", "string"),
    "perfgate_hardware": ("the serving host's hardware key (as --perf-hardware)", "string"),
    "perfgate_output": ("where run JSON and server logs go (as --perf-output)", "string"),
    "perfgate_summary": ("append the Markdown summary here (as --perf-summary)", "string"),
    "perfgate_history": ("the history directory (as --perf-history)", "string"),
    "perfgate_no_plots": ("write no PNG plots (as --perf-no-plots)", "bool"),
}


_INI_PATHS = ("perfgate_server_log", "perfgate_output", "perfgate_summary", "perfgate_history")


# perfgate's options before they all took the --perf- prefix (pytest-base-url and
# pytest-profiling own --base-url and --profile)
RENAMED_OPTIONS = {
    "--profile": "--perf-profile",
    "--base-url": "--perf-base-url",
    "--server-log": "--perf-server-log",
    "--update-baselines": "--perf-update-baselines",
}


def setting(config: pytest.Config, name: str) -> Any:
    """An option's value from the command line, else from the project's configuration
    (paths there are relative to the configuration file's directory)."""
    given = config.getoption(name)
    if given not in (None, False):
        return given
    if name not in INI_SETTINGS:
        return given
    value = config.getini(name)
    if name in _INI_PATHS and value:
        return str(config.rootpath / value)
    return value or given


def progress(config: pytest.Config) -> ProgressView:
    """Progress on pytest's terminal: live in a terminal, plain lines in a log, nothing
    under ``-q``; always with pytest's output capture suspended."""

    def screen() -> contextlib.AbstractContextManager[object]:
        capture = config.pluginmanager.get_plugin("capturemanager")
        return capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()

    def write(message: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            print(message)
            return
        with screen():
            reporter.write_line(message)

    return ProgressView(write, display_mode(config), screen=screen)


def display_mode(config: pytest.Config) -> Mode:
    """quiet under -q; terminal where pytest writes to one; else plain lines."""
    if config.get_verbosity() < 0:
        return "quiet"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return "terminal" if reporter is not None and reporter.isatty else "plain"


def gate_options(config: pytest.Config) -> GateOptions:
    """The gate's options from the command line and ini settings, checked (a usage error
    when not)."""
    repeats = config.getoption("perfgate_repeats")
    abort = config.getoption("perfgate_abort_below")
    tolerance = config.getoption("perfgate_tolerance")
    if repeats is not None and repeats < 1:
        raise pytest.UsageError("perfgate: --perf-repeats must be >= 1")
    if abort is not None and not 0 <= abort < 1:
        raise pytest.UsageError("perfgate: --perf-abort-below must be in [0, 1)")
    if tolerance is not None and not 0 <= tolerance < 10:
        raise pytest.UsageError("perfgate: --perf-tolerance must be in [0, 10), e.g. 0.1")
    if tolerance is not None and not config.getoption("perfgate_update"):
        raise pytest.UsageError(
            "perfgate: --perf-tolerance only applies with --perf-update-baselines"
        )
    accept_golden = config.getoption("perfgate_accept_golden")
    if accept_golden and not config.getoption("perfgate_update"):
        raise pytest.UsageError(
            "perfgate: --perf-accept-golden only applies with --perf-update-baselines"
        )
    allow = config.getoption("perfgate_allow_no_baseline")
    return GateOptions(
        repeats=repeats,
        abort_below=abort,
        tolerance=tolerance,
        hardware=setting(config, "perfgate_hardware"),
        allow_no_baseline=bool(
            config.getini("perfgate_allow_no_baseline") if allow is None else allow
        ),
        accept_golden=accept_golden,
    )


def server_log(config: pytest.Config) -> Path | None:
    """The attached server's log file (``--perf-server-log``), checked; None when not given."""
    path = setting(config, "perfgate_server_log")
    if path is None:
        return None
    if not setting(config, "perfgate_base_url"):
        raise pytest.UsageError(
            "perfgate: --perf-server-log only applies with --perf-base-url (perfgate reads "
            "the logs of servers it starts itself)"
        )
    if not Path(path).is_file():
        raise pytest.UsageError(f"perfgate: --perf-server-log {path}: no such file")
    return Path(path)


# perfgate's options that take a path, as written on the command line
PATH_OPTIONS = (
    "--perf-profile",
    "--perf-server-log",
    "--perf-output",
    "--perf-summary",
    "--perf-history",
)


def refuse_a_rootdir_taken_from_an_option(config: pytest.Config) -> None:
    """pytest picks its rootdir and configuration file before plugins' options are known,
    so the value of ``--perf-output /existing/dir`` (space, not ``=``) counts as a test path
    there: the project's pyproject.toml, profiles and baselines can then go unfound. Refuse
    when such a value was given and no configuration file of this directory or above it
    was read, with what to write instead."""
    here = config.invocation_params.dir.resolve()
    ini = config.inipath
    if ini is not None and ini.resolve().parent in (here, *here.parents):
        return  # the project's own configuration was read: the rootdir is its
    args = list(config.invocation_params.args)
    for flag in PATH_OPTIONS:
        for i, arg in enumerate(args[:-1]):
            value = args[i + 1]
            if arg == flag and (here / value).exists():
                raise pytest.UsageError(
                    f"perfgate: pytest took {flag}'s value {value} for a test path when it "
                    f"chose its rootdir ({config.rootpath}), so this project's configuration, "
                    f"profiles and baselines may not be found. Write {flag}={value} (with "
                    f"'='), or add --rootdir=."
                )
