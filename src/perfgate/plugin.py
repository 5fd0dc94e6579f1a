"""pytest plugin: options, markers, the run's session object, ordering, terminal summary.

Thin by design: the work happens in :mod:`perfgate.run.session`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Generator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import pytest

import perfgate.suites
from perfgate.errors import PerfgateError
from perfgate.gate.policy import exit_code
from perfgate.profile import DEFAULT_PROFILE, default_profile, load_profile
from perfgate.render.live import Mode, ProgressView
from perfgate.render.markdown import floors_only_line
from perfgate.run.session import GateOptions, PerfgateSession

# The suites' fixtures, registered where perfgate is configured (not in other projects'
# pytest runs: their own fixtures named client or backend stay theirs)
FIXTURE_MODULES = (
    "perfgate.fixtures.backend",
    "perfgate.fixtures.client",
    "perfgate.fixtures.recorder",
    "perfgate.fixtures.gate",
)
NOT_CONFIGURED = (
    "perfgate is not configured here: no profiles/ directory under the rootdir. Run from "
    "the directory that holds profiles/NAME.toml (perfgate init --perf-base-url URL writes "
    "one), or pass --perf-profile path/to/profile.toml"
)
SESSION_KEY = pytest.StashKey["PerfgateSession | None"]()
SUMMARY_KEY = pytest.StashKey[list[str]]()


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
        "--perf-no-plots",
        dest="perfgate_no_plots",
        action="store_true",
        default=False,
        help="write no PNG plots next to the run JSON (default: plots when matplotlib is "
        "installed: pip install 'perfgate[plots]')",
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


def _setting(config: pytest.Config, name: str) -> Any:
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


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    """An option of perfgate's old name that no other plugin or conftest owns gets a usage
    error that names the new one, instead of pytest's bare 'unrecognized arguments'."""
    result = yield  # the initial conftests are loaded: their options are known now
    _, unknown = parser.parse_known_and_unknown_args(args)
    for arg in unknown:
        name = arg.split("=", 1)[0]
        if name in RENAMED_OPTIONS:
            raise pytest.UsageError(
                f"perfgate: {name} is now {RENAMED_OPTIONS[name]} (every perfgate option "
                f"starts with --perf-, so none clashes with another plugin's); write "
                f"{RENAMED_OPTIONS[name]}{arg[len(name) :]}"
            )
    return result


def _progress(config: pytest.Config) -> ProgressView:
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

    return ProgressView(write, _display_mode(config), screen=screen)


def _display_mode(config: pytest.Config) -> Mode:
    """quiet under -q; terminal where pytest writes to one; else plain lines."""
    if config.get_verbosity() < 0:
        return "quiet"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return "terminal" if reporter is not None and reporter.isatty else "plain"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The terminal reporter exists now (not yet when this plugin was configured)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is not None:
        perf.view.mode = _display_mode(session.config)


def _gate_options(config: pytest.Config) -> GateOptions:
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
        hardware=_setting(config, "perfgate_hardware"),
        allow_no_baseline=bool(
            config.getini("perfgate_allow_no_baseline") if allow is None else allow
        ),
        accept_golden=accept_golden,
    )


def _server_log(config: pytest.Config) -> Path | None:
    path = _setting(config, "perfgate_server_log")
    if path is None:
        return None
    if not _setting(config, "perfgate_base_url"):
        raise pytest.UsageError(
            "perfgate: --perf-server-log only applies with --perf-base-url (perfgate reads "
            "the logs of servers it starts itself)"
        )
    if not Path(path).is_file():
        raise pytest.UsageError(f"perfgate: --perf-server-log {path}: no such file")
    return Path(path)


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# perfgate's options that take a path, as written on the command line
PATH_OPTIONS = (
    "--perf-profile",
    "--perf-server-log",
    "--perf-output",
    "--perf-summary",
    "--perf-history",
)


def _refuse_a_rootdir_taken_from_an_option(config: pytest.Config) -> None:
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perf: performance suite, compared with baselines/")
    config.addinivalue_line("markers", "correctness: correctness suite, runs before perf")
    config.addinivalue_line(
        "markers", "usability: a correctness check whose failure leaves perf unmeasured"
    )
    config.addinivalue_line(
        "markers",
        "twin(prompts, max_tokens): compares with the profile's twin, whose greedy outputs "
        "of these prompts are computed first, with the twin running alone",
    )
    config.stash[SUMMARY_KEY] = []
    _refuse_a_rootdir_taken_from_an_option(config)
    root = config.rootpath
    profiles_dir = root / config.getini("perfgate_profiles_dir")
    chosen = config.getoption("perfgate_profile")
    if chosen is None and not profiles_dir.is_dir():
        config.stash[SESSION_KEY] = None  # not a perfgate project: stay out of the way
        return
    output = _setting(config, "perfgate_output") or str(root / ".perfgate")
    try:
        name = chosen or config.getini("perfgate_profile") or default_profile(profiles_dir)
        profile = load_profile(name, profiles_dir)
        session = PerfgateSession(
            profile,
            root=root,
            baselines_dir=root / config.getini("perfgate_baselines_dir"),
            output_dir=Path(output),
            base_url=_setting(config, "perfgate_base_url"),
            server_log=_server_log(config),
            update_baselines=config.getoption("perfgate_update"),
            options=_gate_options(config),
            progress=_progress(config),
            history_dir=Path(h) if (h := _setting(config, "perfgate_history")) else None,
        )
    except PerfgateError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from exc
    config.stash[SESSION_KEY] = session
    for module in FIXTURE_MODULES:
        config.pluginmanager.import_plugin(module)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # so servers get stopped


def get_session(config: pytest.Config) -> PerfgateSession:
    """The run's session; fails the test clearly where perfgate is not configured."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        pytest.fail(NOT_CONFIGURED, pytrace=False)
    return session


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Correctness tests run first: no speed is reported for a backend that answers wrongly.
    perfgate's own suites, collected where perfgate is not configured, are refused."""
    if config.stash.get(SESSION_KEY, None) is None:
        suites = Path(perfgate.suites.__file__).parent
        if any(item.path.is_relative_to(suites) for item in items):
            raise pytest.UsageError(NOT_CONFIGURED)
    items.sort(key=lambda item: 0 if item.get_closest_marker("correctness") else 1)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Whether this session runs perf tests: then every baseline figure is judged at its
    end, including those of perf tests deselected with -k."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is not None:
        perf.perf_selected = any(  # a measuring perf test (the correctness checks are perf too)
            item.get_closest_marker("perf") and not item.get_closest_marker("correctness")
            for item in session.items
        )
        twins = [m for item in session.items if (m := item.get_closest_marker("twin"))]
        if twins and perf.profile.correctness.twin_profile is not None:
            perf.twin_request = (
                list(twins[0].kwargs["prompts"]),
                int(twins[0].kwargs["max_tokens"]),
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    session = item.config.stash.get(SESSION_KEY, None)
    if session is not None and report.failed and item.get_closest_marker("correctness"):
        if item.nodeid not in session.correctness_failures:
            session.correctness_failures.append(item.nodeid)
        if item.get_closest_marker("usability") and item.nodeid not in session.unusable:
            session.unusable.append(item.nodeid)
        if report.when == "call":  # the check ran: not a server that never answered
            session.answered_wrongly = True
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    perf.stop_backend()
    if perf.backend is None and not perf.run.measurements:
        return  # nothing of this run touched a server
    lines = session.config.stash[SUMMARY_KEY]
    status = {0: "passed", 2: "interrupted"}.get(int(exitstatus), "failed")
    if perf.perf_selected and not perf.update_baselines and perf.baseline is not None:
        perf.run.checks = perf.verdicts().checks  # every baseline figure, deselected included
    perf.apply_creep_rule()  # may turn passing figures to CREEP
    if any(c.failed for c in perf.run.checks) and status == "passed":
        status = "failed"
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    perf.finish(status)
    if perf.update_baselines:
        lines.extend(perf.record_baseline())
        if perf.recording_refused and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked to record; wrote nothing
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        no_baseline = (
            perf.perf_selected
            and bool(perf.hardware_key)  # the baseline was looked for
            and perf.baseline is None
            and not perf.update_baselines
            and not perf.options.allow_no_baseline
        )
        session.exitstatus = exit_code(
            int(session.exitstatus),
            perf.run.checks,
            correctness_failed=perf.answered_wrongly,
            no_baseline=no_baseline,
        )
    lines.append(f"perfgate: run JSON written to {perf.run_path}")
    lines.extend(perf.append_history())
    summaries = [Path(p) for p in (_setting(session.config, "perfgate_summary"),) if p]
    if github := os.environ.get("GITHUB_STEP_SUMMARY"):
        summaries.append(Path(github))
    summaries = list(dict.fromkeys(p.resolve() for p in summaries))  # each file once
    lines.extend(
        perf.write_reports(
            summary_paths=summaries,
            plots=not _setting(session.config, "perfgate_no_plots"),
            artifact_url=_github_run_url(),
        )
    )


def _github_run_url() -> str | None:
    """In GitHub Actions, the run's page, where its uploaded artifacts are listed."""
    env = os.environ
    if not all(env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")):
        return None
    return (
        f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/"
        f"{env['GITHUB_RUN_ID']}#artifacts"
    )


def _summary_lines(perf: PerfgateSession) -> list[tuple[str, str]]:
    """(colour, line) pairs of the verdict summary: honest about what was not judged."""
    out: list[tuple[str, str]] = []
    checks = perf.run.checks
    judged = [c for c in checks if c.verdict not in ("missing", "no-baseline")]
    missing = [c for c in checks if c.verdict == "missing"]
    regressed = [c for c in checks if c.verdict == "regressed"]
    untrusted = [c for c in checks if c.verdict == "untrusted"]
    noisy = [c for c in checks if c.verdict == "too-noisy"]
    creep = [c for c in checks if c.verdict == "creep"]
    for title, found in (
        ("REGRESSIONS", regressed),
        ("TOO NOISY: the runs neither clear the limit nor fail it beyond noise", noisy),
        ("UNTRUSTED: the harness's timing error could flip the verdict", untrusted),
        ("CREEP: worse than the baseline run after run", creep),
        ("MISSING", missing),
    ):
        if found:
            out.append(("red", f"{title} ({len(found)}):"))
            out += [("red", f"  {check.message()}") for check in found]
    not_run = {name: m.not_run for name, m in perf.run.measurements.items() if m.not_run}
    out += [("red", m.aborted) for m in perf.run.measurements.values() if m.aborted]
    if not_run:
        out.append(("red", f"levels not run: {not_run}"))
    complete = perf.run.status == "passed" and not missing and not not_run
    passed = bool(judged) and complete and not any(c.failed for c in checks)
    past = [c for c in checks if not c.failed and c.past_limit]
    if passed and perf.baseline_tier == "any":
        out.append(("yellow", floors_only_line(len(judged), checks, perf.record_command())))
    elif passed and past:
        out.append(
            (
                "yellow",
                f"all {len(judged)} baseline figures judged, none regressed; {len(past)} past "
                "the limit, passed within the spread between hosts (this host is not the "
                f"recording's: {perf.reach.describe()}). Record a baseline on this host to "
                f"gate them exactly: {perf.record_command()}",
            )
        )
        out += [("yellow", f"  {check.message()}") for check in past]
    elif passed:
        out.append(
            (
                "green",
                f"all {len(judged)} baseline figures judged, all within tolerance "
                f"({perf.baseline_tier} baseline: {perf.reach.describe()})",
            )
        )
    elif perf.baseline is not None:
        total = len(perf.baseline.metrics)
        out.append(
            (
                "yellow",
                f"run {perf.run.status}: {len(judged)} of {total} baseline figures judged, "
                f"{len(regressed)} regressed, {len(missing)} missing"
                + (f", {len(noisy)} too noisy" if noisy else "")
                + (f", {len(untrusted)} untrusted" if untrusted else "")
                + (f", {len(creep)} creeping" if creep else ""),
            )
        )
    for check in checks if perf.baseline_tier == "exact" else []:
        if check.verdict == "improved":
            out.append(
                ("green", f"  improved: {check.message()} (consider --perf-update-baselines)")
            )
    out += [("yellow", f"warning: {message}") for message in perf.warnings]
    if perf.correctness_failures and perf.run.measurements:
        out.append(
            (
                "red",
                "the perf figures above come from a backend that FAILED correctness: "
                + ", ".join(perf.correctness_failures),
            )
        )
    return out


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    perf = config.stash.get(SESSION_KEY, None)
    if perf is None or (perf.backend is None and not perf.run.measurements):
        return
    terminalreporter.section(f"perfgate: {perf.profile.name}")
    for name in perf.run.measurements:
        terminalreporter.write_line(f"[{name}]")
        terminalreporter.write_line(perf.table(name))
        terminalreporter.write_line("")
    summary = _summary_lines(perf)
    for colour, line in summary:
        terminalreporter.write_line(line, **{colour: True})
    if perf.run.diagnosis is not None:
        for line in perf.run.diagnosis.lines():
            terminalreporter.write_line(line, yellow=True)
    if perf.hardware_key:
        tier = perf.tier_note()
        colour = "yellow" if perf.baseline_tier != "exact" else "green"
        terminalreporter.write_line(tier, **{colour: True})
    for line in config.stash.get(SUMMARY_KEY, []):
        terminalreporter.write_line(line)
