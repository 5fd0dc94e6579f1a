"""The run history for people: a table of each figure over the runs, and its plot."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.errors import PerfgateError
from perfgate.gate.creep import FigurePoint, HistoryEntry, same_baseline
from perfgate.gate.figures import BY_NAME, delta_text
from perfgate.gate.values import level_name, parse_key
from perfgate.render.plots.common import require_matplotlib

_MARKS = {"creep": "C", "regressed": "R", "too-noisy": "N", "untrusted": "U", "improved": "+"}


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
    if previous is not None and not same_baseline(previous.baseline, point.baseline):
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
    :class:`~perfgate.render.plots.common.PlotsUnavailable` (with the install hint) without
    matplotlib."""
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
