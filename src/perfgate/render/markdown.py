"""The Markdown summary of a run, for a pull request (``$GITHUB_STEP_SUMMARY``) or a file.

Computed from the run JSON alone (:class:`~perfgate.results.run.RunRecord`): the verdict of
every figure, the failed ones first with their evidence, the likely causes and the fact
diff, the provenance, and links to the files. Renders only; decides nothing. When every
figure passes, the visible part fits on one screen: a row per level, the full figure
table folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfgate.gate.figures import BY_NAME, SEARCH_FIGURES, delta_text
from perfgate.gate.values import figure_key, parse_key
from perfgate.gate.verdict import Check, floor_slack
from perfgate.measure.data import Measurement
from perfgate.results.run import RunRecord

MARKS = {
    "pass": "✅ pass",
    "improved": "✅ improved",
    "regressed": "❌ regressed",
    "too-noisy": "❌ too noisy",
    "untrusted": "⚠️ untrusted",
    "missing": "❌ missing",
    "creep": "❌ creep",
    "no-baseline": "⚪ no baseline",
}
MAX_LOG_LINES = 15


def figure_text(key: str, value: float | None, unit: str) -> str:
    """A figure's value for people (:meth:`perfgate.gate.figures.Figure.text`)."""
    return parse_key(key).figure.text(value, unit)


def _delta(check: Check) -> str:
    return delta_text(check.delta_pct, "%")


def _cell(text: str) -> str:
    """Text made safe for a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def floors_only_line(judged: int, checks: Sequence[Check], record_command: str) -> str:
    """A run that passed against floors only (the ``any`` tier) says so, and how much
    slower the server could be unseen: it is not an exact comparison."""
    slack = floor_slack(checks)
    unseen = (
        f"; a server up to {slack[0]:.1f}x slower would still pass ({slack[1]} is nearest "
        "its floor)"
        if slack
        else ""
    )
    return (
        f"all {judged} floors met (any baseline: floors only, not a comparison with this "
        f"hardware's figures){unseen}. Record an exact baseline with: {record_command}"
    )


def _headline(run: RunRecord) -> str:
    name = run.profile.get("name", "?")
    checks = run.checks
    failed = [c for c in checks if c.failed]
    judged = [c for c in checks if c.verdict not in ("missing", "no-baseline")]
    if run.status == "passed" and not failed and run.baseline and run.baseline.tier == "any":
        slack = floor_slack(checks)
        unseen = f"; up to {slack[0]:.1f}x slower would pass" if slack else ""
        return f"### ⚠️ perfgate `{name}`: passed against floors only: {len(judged)} figures{unseen}"
    if run.status == "passed" and not failed:
        mark = "✅"
        what = (
            f"passed: all {len(judged)} figures within tolerance"
            if judged
            else "passed (no figure gated)"
        )
    else:
        mark = "⚠️" if run.status == "interrupted" else "❌"
        counts: dict[str, int] = {}
        for check in failed:
            counts[check.verdict] = counts.get(check.verdict, 0) + 1
        parts = [f"{n} {verdict.replace('-', ' ')}" for verdict, n in counts.items()]
        what = f"{run.status}" + (f": {', '.join(parts)} of {len(checks)} figures" if parts else "")
    return f"### {mark} perfgate `{name}`: {what}"


def _provenance(run: RunRecord) -> str:
    hardware = run.hardware.get("key") or run.hardware.get("label") or "?"
    parts = [f"{run.engine} {run.engine_version}", f"hardware `{hardware}`"]
    if (a := run.reference) is not None:  # a side-by-side run: judged against A, not a file
        parts.append(
            f"side by side against A `{a.profile.get('name')}` ({a.engine} {a.engine_version}), "
            "runs interleaved A B B A"
        )
    elif run.baseline is not None:
        scope = f" ({run.baseline.scope})" if run.baseline.scope else ""
        parts.append(f"{run.baseline.tier} baseline `{run.baseline.path}`{scope}")
        if run.baseline.detectable is not None:
            parts.append(f"fails a figure {run.baseline.detectable:.0%} worse 95% of the time")
    if run.git_commit:
        parts.append(f"commit `{run.git_commit[:12]}`")
    parts += [f"perfgate {run.perfgate_version}", run.created_at]
    return " · ".join(parts)


def _figure_table(checks: Sequence[Check], *, why: bool) -> list[str]:
    against = checks[0].against if checks else "baseline"  # a side-by-side run's: A
    head = f"| figure | {against} | measured | interval | limit | Δ | verdict |"
    rule = "|---|---:|---:|---|---:|---:|---|"
    if why:
        head, rule = head + " why |", rule + "---|"
    rows = [head, rule]
    for c in checks:
        row = (
            f"| `{c.key}` | {figure_text(c.key, c.baseline, c.unit)} | "
            f"{figure_text(c.key, c.measured, c.unit)} | {_cell(c.interval) or '-'} | "
            f"{figure_text(c.key, c.limit, c.unit)} | {_delta(c)} | {MARKS[c.verdict]} |"
        )
        rows.append(row + (f" {_cell(c.why)} |" if why else ""))
    return rows


def _levels_table(run: RunRecord) -> list[str]:
    """One row per level: each gated figure's measured value, Δ and mark."""
    by_key = {c.key: c for c in run.checks}
    out: list[str] = []
    for name, measurement in run.measurements.items():
        if measurement.searches:
            out += _capacity_lines(name, measurement, by_key)
            continue
        levels = sorted(measurement.by_concurrency())
        shown = [
            f
            for f in BY_NAME.values()
            if any(figure_key(name, c, f.name) in by_key for c in [*levels, *measurement.not_run])
        ]
        if not shown:
            continue
        out += [
            f"**{name}**",
            "",
            "| C | " + " | ".join(f.title for f in shown) + " |",
            "|---:|" + "---|" * len(shown),
        ]
        for c in sorted({*levels, *measurement.not_run}):
            cells = []
            for f in shown:
                check = by_key.get(figure_key(name, c, f.name))
                if check is None:
                    cells.append("-")
                elif check.measured is None:
                    cells.append(MARKS[check.verdict])
                else:
                    value = figure_text(check.key, check.measured, check.unit)
                    cells.append(f"{value} ({_delta(check)}) {MARKS[check.verdict].split()[0]}")
            out.append(f"| {c:g} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _capacity_lines(name: str, measurement: Measurement, by_key: Mapping[str, Check]) -> list[str]:
    """A capacity measurement: what each search found, and the gated figure's verdict."""
    out = [f"**{name}**", ""]
    out += [f"- search {i}: {s.describe()}" for i, s in enumerate(measurement.searches, 1)]
    for figure in SEARCH_FIGURES:
        if (check := by_key.get(figure_key(name, None, figure.name))) is not None:
            value = figure_text(check.key, check.measured, check.unit)
            out.append(f"- {figure.title}: {value} ({_delta(check)}) {MARKS[check.verdict]}")
    return [*out, ""]


def markdown_summary(
    run: RunRecord,
    *,
    run_json: str | None = None,
    files: Sequence[str] = (),
    artifact_url: str | None = None,
) -> str:
    """The run's summary in GitHub-flavoured Markdown. ``run_json`` and ``files`` (plots)
    are listed by path; ``artifact_url`` links where CI uploaded them."""
    failed = [c for c in run.checks if c.failed]
    out = [_headline(run), "", _provenance(run), ""]
    if run.baseline and run.baseline.tier == "any":
        out += [f"> {_cell(note)}" for note in run.notes if note.startswith("no exact baseline")]
        out.append("")
    if failed:
        out += ["**Failed figures**", "", *_figure_table(failed, why=True), ""]
    aborted = [m.aborted for m in run.measurements.values() if m.aborted]
    out += [f"> {text}" for text in aborted]
    not_run = {n: m.not_run for n, m in run.measurements.items() if m.not_run}
    if not_run:
        out.append(f"> levels not run: {not_run}")
    if aborted or not_run:
        out.append("")
    if run.correctness_failures:
        out += [
            "> ❌ the figures come from a backend that FAILED correctness: "
            + ", ".join(f"`{t}`" for t in run.correctness_failures),
            "",
        ]
    out += _levels_table(run)
    if run.checks:
        out += [
            f"<details><summary>Every figure ({len(run.checks)})</summary>",
            "",
            *_figure_table(run.checks, why=False),
            "",
            "</details>",
            "",
        ]
    out += _diagnosis(run, "A" if run.reference is not None else "the baseline")
    if run.warnings:
        out += ["**Warnings**", "", *(f"- {_cell(w)}" for w in run.warnings), ""]
    out += _files(run_json, files, artifact_url)
    return "\n".join(out).rstrip() + "\n"


def _diagnosis(run: RunRecord, against: str = "the baseline") -> list[str]:
    why = run.diagnosis
    if why is None:
        return []
    out: list[str] = []
    if why.causes:
        out += ["**Likely causes**, most likely first:", ""]
        out += [f"{i}. {_cell(text)}" for i, text in enumerate(why.causes, 1)]
        out.append("")
    if why.changes:
        out += [f"**Facts that differ from {against}**", ""]
        out += [f"- `{_cell(change)}`" for change in why.changes]
        out.append("")
    if why.unknown:
        known = ", ".join(f"`{_cell(key)}`" for key in why.unknown)
        out += [f"Facts not known for this run (not reported): {known}", ""]
    if why.log_lines:
        lines = why.log_lines[-MAX_LOG_LINES:]
        out += [
            f"<details><summary>Server log lines matching <code>{why.grep}</code></summary>",
            "",
            "```",
            *lines,
            "```",
            "",
            "</details>",
            "",
        ]
    return out


def _files(run_json: str | None, files: Sequence[str], artifact_url: str | None) -> list[str]:
    listed = [p for p in (run_json, *files) if p]
    if not listed and not artifact_url:
        return []
    out = ["**Files**: " + ", ".join(f"`{p}`" for p in listed)]
    if artifact_url:
        out[0] += f" ([download]({artifact_url}))"
    return [*out, ""]
