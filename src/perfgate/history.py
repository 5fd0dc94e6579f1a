"""Run history: every run's gated figures, one JSON line per run, and the slow-creep rule.

A profile's history is ``<history-dir>/<profile>.jsonl`` (default ``.perfgate/history``);
CI can cache or commit it. Each line is a :class:`HistoryEntry`: the run's provenance and,
for each figure judged against a baseline, the measured value, the baseline value and
the verdict. Lines are appended whole, so a crash leaves at most a partial last line,
which :func:`load_history` skips and :func:`append_entry` repairs.

The creep rule (:func:`apply_creep_rule`, ``gate.creep_runs``/``gate.creep_margin``):
a figure within its tolerance fails as CREEP when it has been worse than the same
baseline value by more than the margin in N runs in a row. Noise alone does that with
chance ``P(one run worse than the margin) ** N`` (1% noise, 2% margin, N=5: about 6e-9);
a real 3% loss inside a 10% tolerance does it in about 8 runs at that noise.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from perfgate.baseline import Check
from perfgate.errors import PerfgateError
from perfgate.figures import BY_NAME, delta_text, level_name, parse_key
from perfgate.plots import require_matplotlib
from perfgate.report import RunRecord
from perfgate.stats import Direction

DEFAULT_HISTORY_DIR = Path(".perfgate/history")
CREEP_APPLIES = ("pass", "improved")  # a failing or missing figure keeps its verdict
_EPS_PCT = 1e-9  # "more than the margin": a delta exactly at it (float noise) is not worse
_MARKS = {"creep": "C", "regressed": "R", "too-noisy": "N", "untrusted": "U", "improved": "+"}


class FigurePoint(BaseModel):
    """One figure of one run, as judged against its baseline."""

    measured: float = Field(description="The run's figure (median of its runs of the level).")
    baseline: float = Field(description="The baseline value it was judged against.")
    limit: float | None = Field(None, description="Worst acceptable figure.")
    tolerance: float | None = Field(None, description="Relative tolerance (0.1 = 10%).")
    delta_pct: float = Field(description="(measured - baseline) / baseline, in percent.")
    verdict: str = Field(description="The verdict (pass, improved, regressed, creep, ...).")
    direction: Direction = "higher"
    unit: str = ""


class HistoryEntry(BaseModel):
    """One run of a profile: provenance and its judged figures (one line of the history)."""

    created_at: str
    profile: str
    status: str = Field(description="passed or failed.")
    engine: str
    engine_version: str = "unknown"
    git_commit: str | None = None
    hardware_key: str | None = None
    baseline_tier: str | None = Field(None, description="exact or any.")
    baseline_path: str | None = None
    run_json: str = Field("", description="The run JSON this entry was taken from.")
    figures: dict[str, FigurePoint] = Field(default_factory=dict)


def entry_from_run(run: RunRecord, run_path: str) -> HistoryEntry | None:
    """The history entry of a finished run; None when it judged no figure against a
    baseline, or was interrupted or is still running."""
    if run.status in ("running", "interrupted"):
        return None
    figures: dict[str, FigurePoint] = {}
    for check in run.checks:
        if check.measured is None or check.baseline is None or check.delta_pct is None:
            continue  # not judged against a baseline figure
        figures[check.key] = FigurePoint(
            measured=check.measured,
            baseline=check.baseline,
            limit=check.limit,
            tolerance=check.tolerance,
            delta_pct=check.delta_pct,
            verdict=check.verdict,
            direction=check.direction,
            unit=check.unit,
        )
    if not figures:
        return None
    ref = run.baseline
    hardware = run.hardware.get("key") or (ref.hardware_key if ref else None)
    return HistoryEntry(
        created_at=run.created_at,
        profile=str(run.profile.get("name", "")),
        status=run.status,
        engine=run.engine,
        engine_version=run.engine_version,
        git_commit=run.git_commit,
        hardware_key=str(hardware) if hardware else None,
        baseline_tier=ref.tier if ref else None,
        baseline_path=ref.path if ref else None,
        run_json=run_path,
        figures=figures,
    )


def history_path(directory: Path, profile: str) -> Path:
    """Where a profile's history lives."""
    return directory / f"{profile}.jsonl"


def append_entry(path: Path, entry: HistoryEntry) -> None:
    """Append one entry as one JSON line, in a single write (creating the directory). A
    partial last line left by an earlier crash is dropped first, so none stays in the
    middle of the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (entry.model_dump_json() + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            _repair_tail(fd, size)
        view = memoryview(data)
        while view:  # one write on a local disk; the loop only guards a short write
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _repair_tail(fd: int, size: int) -> None:
    """End the file at a line break: a complete last line gets its newline, a partial one
    (a crash mid-write) is cut off."""
    text = os.pread(fd, size, 0)
    start = text.rfind(b"\n") + 1
    try:
        HistoryEntry.model_validate_json(text[start:])
    except ValidationError:
        os.ftruncate(fd, start)
    else:
        os.write(fd, b"\n")


def load_history(path: Path) -> list[HistoryEntry]:
    """Every entry of a history file, oldest first (a missing file is an empty history).
    A partial last line (a crash mid-write) is skipped; any other bad line is an error
    naming the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    last = len(lines) - 1  # the text after the final newline: "" unless cut short
    entries: list[HistoryEntry] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(HistoryEntry.model_validate_json(line))
        except ValidationError as exc:
            if number - 1 == last:
                continue  # written partly when a run crashed: not an entry
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(line)"
            raise PerfgateError(
                f"{path}:{number}: not a perfgate history entry ({where}: {first['msg']}); "
                "each line is one run: fix that line or delete it"
            ) from exc
    return entries


def _worse(delta_pct: float, direction: Direction, margin: float) -> bool:
    """Whether a figure is worse than its baseline by more than ``margin`` (a fraction)."""
    threshold = margin * 100.0 + _EPS_PCT
    return delta_pct < -threshold if direction == "higher" else delta_pct > threshold


def _same_baseline(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def apply_creep_rule(
    checks: Sequence[Check],
    history: Sequence[HistoryEntry],
    *,
    runs: int,
    margin: float,
    hardware_key: str | None = None,
) -> list[Check]:
    """This run's checks with the slow-creep rule applied.

    ``history`` holds the profile's earlier entries, oldest first. A passing (or
    improved) figure becomes CREEP when this run and the ``runs - 1`` entries right
    before it all have it worse than the same baseline value by more than ``margin``
    (0.02 = 2%). With ``hardware_key``, entries of other hardware are left out. Other
    verdicts stay. The input checks are not changed.
    """
    if runs < 2:
        raise ValueError(f"creep runs must be >= 2, got {runs}")
    if not 0 < margin < 1:
        raise ValueError(f"creep margin must be a fraction between 0 and 1, got {margin}")
    earlier = [e for e in history if hardware_key is None or e.hardware_key == hardware_key]
    window = earlier[len(earlier) - (runs - 1) :] if len(earlier) >= runs - 1 else None
    out: list[Check] = []
    for check in checks:
        deltas = _streak(check, window, margin) if window is not None else None
        if deltas is None:
            out.append(check.model_copy())
            continue
        shown = ", ".join(f"{d:+.1f}%" for d in deltas)
        why = (
            f"worse than the baseline by more than {margin:.1%} in {runs} runs in a row "
            f"({shown}): a slow creep; if it is accepted, re-record the baseline "
            "(--perf-update-baselines)"
        )
        out.append(check.model_copy(update={"verdict": "creep", "why": why}))
    return out


def _streak(check: Check, window: Sequence[HistoryEntry], margin: float) -> list[float] | None:
    """The deltas (oldest first) when the check and every entry of the window have the
    figure worse than the same baseline by more than the margin; else None."""
    if (
        check.verdict not in CREEP_APPLIES
        or check.baseline is None
        or check.delta_pct is None
        or not _worse(check.delta_pct, check.direction, margin)
    ):
        return None
    deltas: list[float] = []
    for entry in window:
        point = entry.figures.get(check.key)
        if (
            point is None
            or point.direction != check.direction
            or not _same_baseline(point.baseline, check.baseline)
            or not _worse(point.delta_pct, point.direction, margin)
        ):
            return None
        deltas.append(point.delta_pct)
    return [*deltas, check.delta_pct]


def _key_order(key: str) -> tuple[str, float, int, str]:
    try:
        parsed = parse_key(key)
    except ValueError:
        return ("~", 0, 0, key)
    level = -1 if parsed.concurrency is None else parsed.concurrency  # measurement-wide first
    return (parsed.measurement, level, list(BY_NAME).index(parsed.figure.name), key)


def history_keys(entries: Sequence[HistoryEntry]) -> list[str]:
    """Every figure in the entries, by measurement, level and figure."""
    return sorted({k for e in entries for k in e.figures}, key=_key_order)


def select_keys(entries: Sequence[HistoryEntry], patterns: Sequence[str]) -> list[str]:
    """The figures matching keys or glob patterns (``sweep.*.agg_tok_s``); an error naming
    the figures there are when a pattern matches none."""
    known = history_keys(entries)
    chosen: list[str] = []
    for pattern in patterns:
        found = [k for k in known if fnmatch.fnmatchcase(k, pattern)]
        if not found:
            raise PerfgateError(
                f"no figure {pattern!r} in the history; its figures are: {', '.join(known)}"
            )
        chosen += [k for k in found if k not in chosen]
    return chosen


def _run_columns(entry: HistoryEntry, index: int) -> list[str]:
    version = entry.engine_version
    if len(version) > 24:
        version = version[:23] + "…"
    return [
        str(index),
        entry.created_at[:16].replace("T", " "),
        (entry.git_commit or "-")[:8],
        version,
        entry.status,
    ]


def _cell(entry: HistoryEntry, key: str, previous: FigurePoint | None) -> str:
    point = entry.figures.get(key)
    if point is None:
        return "-"
    marks = _MARKS.get(point.verdict, "")
    if previous is not None and not _same_baseline(previous.baseline, point.baseline):
        marks += "*"
    value = f"{point.measured:.4g} {delta_text(point.delta_pct, '%')}"
    return value + (f" {marks}" if marks else "")


def render_history(
    entries: Sequence[HistoryEntry], keys: Sequence[str] | None = None, *, width: int = 120
) -> str:
    """A text table: one row per run (oldest first), one column per figure with its
    measured value and Δ% against its baseline. Figure columns wrap into blocks of at
    most ``width`` characters."""
    keys = list(keys) if keys is not None else history_keys(entries)
    head = ["#", "date (UTC)", "commit", "engine version", "status"]
    rows = [_run_columns(e, i) for i, e in enumerate(entries, 1)]
    columns: list[tuple[list[str], list[str]]] = []  # (header lines, cells)
    for key in keys:
        cells: list[str] = []
        previous: FigurePoint | None = None
        for entry in entries:
            cells.append(_cell(entry, key, previous))
            previous = entry.figures.get(key, previous)
        point = previous
        better = f"{point.direction} is better" if point else ""
        unit = f"{point.unit}, " if point and point.unit else ""
        columns.append(([key, f"({unit}{better})"], cells))
    head_w = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]
    prefix_w = sum(head_w) + 2 * len(head_w)
    blocks: list[list[tuple[list[str], list[str]]]] = [[]]
    used = prefix_w
    for column in columns:
        w = max(len(s) for s in (*column[0], *column[1])) + 3
        if blocks[-1] and used + w > width:
            blocks.append([])
            used = prefix_w
        blocks[-1].append(column)
        used += w
    out: list[str] = []
    for block in blocks:
        widths = [max(len(s) for s in (*c[0], *c[1])) for c in block]
        for line in range(2):
            left = [(head[i] if line == 0 else "").ljust(w) for i, w in enumerate(head_w)]
            right = [c[0][line].rjust(w) for c, w in zip(block, widths, strict=True)]
            out.append("  ".join(left) + "".join(f" | {s}" for s in right))
        out.append("-" * len(out[-1]))
        for r, row in enumerate(rows):
            left = [v.ljust(w) for v, w in zip(row, head_w, strict=True)]
            right = [c[1][r].rjust(w) for c, w in zip(block, widths, strict=True)]
            out.append("  ".join(left) + "".join(f" | {s}" for s in right))
        out.append("")
    out.append(
        "value and Δ% against the baseline; C creep, R regressed, U untrusted, + improved, "
        "* new baseline value"
    )
    return "\n".join(out)


def _kind(key: str) -> str:
    try:
        return parse_key(key).figure.name
    except ValueError:
        return key


def _label(key: str) -> str:
    try:
        parsed = parse_key(key)
    except ValueError:
        return key
    if parsed.concurrency is None:
        return parsed.measurement
    return f"{parsed.measurement} {level_name(parsed.concurrency)}"


def plot_history(
    entries: Sequence[HistoryEntry],
    out: Path,
    keys: Sequence[str] | None = None,
    *,
    margin: float | None = None,
) -> Path:
    """One PNG: a panel per kind of figure, each figure's value per run with its baseline
    (dashed), the drift its tolerance allows (shaded), CREEP and REGRESSED runs marked,
    and (with ``margin``) the creep margin (dotted). Raises
    :class:`perfgate.plots.PlotsUnavailable` (with the install hint) without matplotlib."""
    pyplot = require_matplotlib()
    keys = list(keys) if keys is not None else history_keys(entries)
    if not entries or not keys:
        raise PerfgateError("nothing to plot: the history has no figures")
    order = list(BY_NAME)
    groups: dict[str, list[str]] = {}
    for key in sorted(keys, key=lambda k: order.index(_kind(k)) if _kind(k) in order else 99):
        groups.setdefault(_kind(key), []).append(key)
    fig, axes = pyplot.subplots(
        len(groups),
        1,
        figsize=(12, 1.2 + 3.0 * len(groups)),
        sharex=True,
        squeeze=False,
        layout="constrained",
    )
    try:
        cycle = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
        labels = list(dict.fromkeys(_label(k) for k in keys))  # one colour per level
        colors = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}
        for n, (ax, (name, group)) in enumerate(zip(axes[:, 0], groups.items(), strict=True)):
            _plot_panel(ax, entries, name, group, colors, margin, legend_keys=n == 0)
        x = list(range(1, len(entries) + 1))
        ticks = x[:: max(1, math.ceil(len(entries) / 15))]
        bottom = axes[-1, 0]
        bottom.set_xticks(ticks)
        bottom.set_xticklabels(
            [f"#{i}\n{entries[i - 1].created_at[5:10]}" for i in ticks], fontsize=8
        )
        bottom.set_xlabel("run (number, date)")
        first, last = entries[0], entries[-1]
        where = f" on {last.hardware_key}" if last.hardware_key else ""
        fig.suptitle(
            f"perfgate history: {last.profile}{where}, {len(entries)} runs "
            f"({first.created_at[:10]} to {last.created_at[:10]})",
            fontsize=12,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    finally:
        pyplot.close(fig)
    return out


def _plot_panel(
    ax: Any,
    entries: Sequence[HistoryEntry],
    name: str,
    group: Sequence[str],
    colors: dict[str, str],
    margin: float | None,
    *,
    legend_keys: bool,
) -> None:
    """One kind of figure: a line per key, its baseline, tolerance band and marks."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    x = list(range(1, len(entries) + 1))
    nan = float("nan")
    direction, unit = "higher", ""
    for key in group:
        color = colors[_label(key)]
        points = [e.figures.get(key) for e in entries]
        known = [(xi, p) for xi, p in zip(x, points, strict=True) if p is not None]
        if not known:
            continue
        direction, unit = known[-1][1].direction, known[-1][1].unit
        measured = [p.measured if p else nan for p in points]
        base = [p.baseline if p else nan for p in points]
        limit = [p.limit if p and p.limit is not None else nan for p in points]
        ax.plot(x, measured, marker="o", ms=3.5, lw=1.4, color=color, label=_label(key))
        ax.plot(x, base, ls="--", lw=1.1, color=color, drawstyle="steps-mid")
        ax.fill_between(x, base, limit, step="mid", color=color, alpha=0.10, lw=0)
        if margin is not None:
            sign = -1.0 if direction == "higher" else 1.0
            creep = [b * (1 + sign * margin) for b in base]
            ax.plot(x, creep, ls=":", lw=0.9, color=color, drawstyle="steps-mid")
        for verdict, style in (("creep", "D"), ("regressed", "X")):
            hits = [(xi, p.measured) for xi, p in known if p.verdict == verdict]
            if hits:
                ax.scatter(
                    *zip(*hits, strict=True),
                    marker=style,
                    s=70 if verdict == "creep" else 60,
                    facecolor="none" if verdict == "creep" else "tab:red",
                    edgecolor="black" if verdict == "creep" else "tab:red",
                    linewidths=1.4,
                    zorder=5,
                )
        xl, pl = known[-1]
        ax.annotate(
            delta_text(pl.delta_pct, "%"),
            (xl, pl.measured),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color=color,
        )
    figure = BY_NAME.get(name)
    title = figure.title if figure else name
    ax.set_title(f"{title}: {direction} is better", fontsize=10, loc="left")
    ax.set_ylabel(f"{title} ({unit})" if unit and unit not in title else title)
    ax.set_xlim(0.6, len(entries) + 0.4 + 0.04 * len(entries))
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if legend_keys:
        handles += [
            Line2D([], [], color="grey", ls="--", label="baseline"),
            Patch(color="grey", alpha=0.25, label="within tolerance"),
            Line2D([], [], ls="", marker="D", mfc="none", mec="black", label="CREEP"),
            Line2D([], [], ls="", marker="X", color="tab:red", label="REGRESSED"),
        ]
        if margin is not None:
            label = f"creep margin ({margin:.1%})"
            handles.insert(-2, Line2D([], [], color="grey", ls=":", label=label))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
