"""The terminal summary at the end of a run: each gated figure's verdict, the files
written, what to run next."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from perfgate.measure.data import Measurement
from perfgate.plugin.state import AB_KEY, SESSION_KEY, SUMMARY_KEY
from perfgate.render.markdown import floors_only_line
from perfgate.run.session import PerfgateSession


def github_run_url() -> str | None:
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
    if judged and (counts := runs_to_verdict(perf.run.measurements)):
        out.append(("bold", counts))
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
    side_by_side = config.stash.get(AB_KEY, None) is not None
    terminalreporter.section(f"perfgate: {perf.profile.name}" + (" (B)" if side_by_side else ""))
    for name in perf.run.measurements:
        terminalreporter.write_line(f"[{name}]")
        terminalreporter.write_line(perf.table(name))
        terminalreporter.write_line("")
    if side_by_side:  # judged against A, not a baseline: the A/B tables and verdict follow
        for line in config.stash.get(SUMMARY_KEY, []):
            terminalreporter.write_line(line)
        return
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


def runs_to_verdict(measurements: Mapping[str, Measurement]) -> str:
    """How many runs the verdicts took: each measurement's runs a level (a level stops
    once every figure is decided), with their median."""
    counts = {
        name: [len(runs) for _, runs in sorted(m.by_concurrency().items())]
        for name, m in measurements.items()
        if m.levels
    }
    every = sorted(n for runs in counts.values() for n in runs)
    if not every:
        return ""
    mid = len(every) // 2
    median = every[mid] if len(every) % 2 else (every[mid - 1] + every[mid]) / 2
    shown = "; ".join(f"{name} {', '.join(map(str, runs))}" for name, runs in counts.items())
    return f"runs a level to a verdict: median {median:g} ({shown})"
