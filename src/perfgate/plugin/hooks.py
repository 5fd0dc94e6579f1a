"""The run's life in pytest's hooks: configure, start, order the tests, record each
result, finish (judge, write, exit code)."""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from pathlib import Path
from types import FrameType

import pytest

import perfgate.suites
from perfgate.errors import PerfgateError
from perfgate.plugin.options import (
    RENAMED_OPTIONS,
    display_mode,
    gate_options,
    progress,
    refuse_a_rootdir_taken_from_an_option,
    server_log,
    setting,
)
from perfgate.plugin.state import (
    AB_KEY,
    FIXTURE_MODULES,
    NOT_CONFIGURED,
    SESSION_KEY,
    SIDES,
    SUMMARY_KEY,
)
from perfgate.plugin.terminal import github_run_url
from perfgate.profile import default_profile, load_profile
from perfgate.render.formats import find_format
from perfgate.run.ab import ABOptions, ABRun
from perfgate.run.session import PerfgateSession


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


def pytest_sessionstart(session: pytest.Session) -> None:
    """The terminal reporter exists now (not yet when this plugin was configured)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is not None:
        perf.view.mode = display_mode(session.config)


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
    refuse_a_rootdir_taken_from_an_option(config)
    root = config.rootpath
    profiles_dir = root / config.getini("perfgate_profiles_dir")
    chosen = config.getoption("perfgate_profile")
    if chosen is None and not profiles_dir.is_dir():
        config.stash[SESSION_KEY] = None  # not a perfgate project: stay out of the way
        return
    output = setting(config, "perfgate_output") or str(root / ".perfgate")
    try:
        name = chosen or config.getini("perfgate_profile") or default_profile(profiles_dir)
        profile = load_profile(name, profiles_dir)
        session = PerfgateSession(
            profile,
            root=root,
            baselines_dir=root / config.getini("perfgate_baselines_dir"),
            output_dir=Path(output),
            base_url=setting(config, "perfgate_base_url"),
            server_log=server_log(config),
            update_baselines=config.getoption("perfgate_update"),
            options=gate_options(config),
            progress=progress(config),
            history_dir=Path(h) if (h := setting(config, "perfgate_history")) else None,
        )
        config.stash[AB_KEY] = side_by_side(config, session, profiles_dir, output)
    except PerfgateError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from exc
    for report in config.getoption("perfgate_report"):  # checked before anything starts
        try:
            find_format(report)
        except ValueError as exc:
            raise pytest.UsageError(f"perfgate: --perf-report: {exc}") from exc
    config.stash[SESSION_KEY] = session
    for module in FIXTURE_MODULES:
        config.pluginmanager.import_plugin(module)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # so servers get stopped


def side_by_side(
    config: pytest.Config, b: PerfgateSession, profiles_dir: Path, output: str
) -> ABRun | None:
    """``--perf-ab A``: the side-by-side run of A (the reference) and this session (B)."""
    name = config.getoption("perfgate_ab")
    if name is None:
        for option in (
            "perfgate_ab_base_url",
            "perfgate_ab_tolerance",
            "perfgate_ab_min_pairs",
            "perfgate_ab_max_pairs",
            "perfgate_ab_alternate",
        ):
            if config.getoption(option) is not None:
                flag = "--perf-" + option.removeprefix("perfgate_").replace("_", "-")
                raise pytest.UsageError(f"perfgate: {flag} needs --perf-ab A")
        return None
    if b.update_baselines:
        raise pytest.UsageError(
            "perfgate: --perf-ab judges B against A, not a baseline: run it without "
            "--perf-update-baselines (record B's baseline after the A/B passed)"
        )
    a = PerfgateSession(
        load_profile(name, profiles_dir),
        root=config.rootpath,
        baselines_dir=config.rootpath / config.getini("perfgate_baselines_dir"),
        output_dir=Path(output),
        base_url=config.getoption("perfgate_ab_base_url"),
        progress=b.view,
    )
    options = ABOptions(  # None: B's profile's [ab]
        tolerance=config.getoption("perfgate_ab_tolerance"),
        allow_model_change=config.getoption("perfgate_ab_allow_model_change"),
        min_pairs=config.getoption("perfgate_ab_min_pairs"),
        max_pairs=config.getoption("perfgate_ab_max_pairs"),
        colocate=False if config.getoption("perfgate_ab_alternate") else None,
    )
    return ABRun(a, b, options, progress=b.progress)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """With --perf-ab, each correctness check runs on both sides: ``[A]`` on the
    reference, ``[B]`` on the candidate (the perf tests measure both in one loop)."""
    if metafunc.config.stash.get(AB_KEY, None) is None:
        return
    if metafunc.definition.get_closest_marker("correctness") and (
        "perfgate_session" in metafunc.fixturenames
    ):
        metafunc.parametrize("perfgate_session", SIDES, indirect=True, scope="session")


def side_of(item: pytest.Item) -> str:
    """Which side a test ran on: "A" for an A/B run's reference, else "B"."""
    callspec = getattr(item, "callspec", None)
    return "A" if callspec is not None and callspec.params.get("perfgate_session") == "A" else "B"


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
    if perf is None:
        return
    twins = [m.kwargs for item in session.items if (m := item.get_closest_marker("twin"))]
    twin = (list(twins[0]["prompts"]), int(twins[0]["max_tokens"])) if twins else None
    perf_tests = any(  # a measuring perf test (the correctness checks are perf too)
        item.get_closest_marker("perf") and not item.get_closest_marker("correctness")
        for item in session.items
    )
    perf.selected(perf_tests=perf_tests, twin=twin)
    if (ab := session.config.stash.get(AB_KEY, None)) is not None:
        ab.a.selected(perf_tests=perf_tests, twin=twin)  # its checks run as [A]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    session = item.config.stash.get(SESSION_KEY, None)
    if side_of(item) == "A" and (ab := item.config.stash.get(AB_KEY, None)) is not None:
        session = ab.a  # the reference's own check failed
    if session is not None and report.failed and item.get_closest_marker("correctness"):
        session.correctness_failed(
            item.nodeid,
            usability=item.get_closest_marker("usability") is not None,
            ran=report.when == "call",  # the check ran: not a server that never answered
        )
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    summaries = [Path(p) for p in (setting(session.config, "perfgate_summary"),) if p]
    if github := os.environ.get("GITHUB_STEP_SUMMARY"):
        summaries.append(Path(github))
    summary_paths = list(dict.fromkeys(p.resolve() for p in summaries))  # each file once
    if (ab := session.config.stash.get(AB_KEY, None)) is not None:
        outcome = ab.conclude(
            int(exitstatus),
            summary_paths=summary_paths,
            reports=session.config.getoption("perfgate_report"),
            artifact_url=github_run_url(),
            plots=not setting(session.config, "perfgate_no_plots"),
        )
        session.exitstatus = outcome.exit_code
        session.config.stash[SUMMARY_KEY].extend(outcome.lines)
        return
    outcome = perf.conclude(
        int(exitstatus),
        summary_paths=summary_paths,
        plots=not setting(session.config, "perfgate_no_plots"),
        reports=session.config.getoption("perfgate_report"),
        artifact_url=github_run_url(),
    )
    session.exitstatus = outcome.exit_code
    session.config.stash[SUMMARY_KEY].extend(outcome.lines)
