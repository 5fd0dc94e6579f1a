"""Drawing helpers: axes, legends, the runs' points, the baseline band, verdict marks."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from perfgate.gate.verdict import Check
from perfgate.measure.data import Measurement
from perfgate.render.plots.common import (
    DPI,
    MARK_LABELS,
    MARKS,
    Nudge,
    concurrency_scale,
    run_failed,
    run_title,
)
from perfgate.render.plots.points import Point
from perfgate.results.run import RunRecord


class Legend:
    """Collects each label once across a figure's axes, for one legend below them."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def label(self, text: str) -> str:
        """The label, or one that matplotlib leaves out of legends when already used."""
        if text in self.seen:
            return "_nolegend_"
        self.seen.add(text)
        return text

    def place(self, fig: Any, axes: Iterable[Any]) -> None:
        """One legend under the axes, outside the plot areas."""
        handles: dict[str, Any] = {}
        for ax in axes:
            for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(text, handle)
        if handles:
            fig.legend(
                list(handles.values()),
                list(handles),
                loc="outside lower center",
                ncols=min(4, len(handles)),
                fontsize="small",
                frameon=False,
            )


def concurrency_axis(ax: Any, levels: Iterable[int | float]) -> None:
    """Ticks at the actual levels; log base 2 when they span a factor of 10 or more."""
    ordered = sorted(set(levels)) or [1]
    lo, hi = ordered[0], ordered[-1]
    if concurrency_scale(ordered) == "log":
        ax.set_xscale("log", base=2)
        ax.set_xlim(lo / 1.35, hi * 1.35)
    else:
        pad = max(0.35, (hi - lo) * 0.06)
        ax.set_xlim(lo - pad, hi + pad)
    ax.set_xticks(ordered, [str(c) for c in ordered])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (requests in flight)")
    ax.grid(True, alpha=0.3)


def curves_first(measurements: Mapping[str, Measurement]) -> dict[str, Measurement]:
    """Measurements with more than one level (the sweep) first: they are the curves."""
    return dict(sorted(measurements.items(), key=lambda item: len(item[1].by_concurrency()) < 2))


def level_nudges(
    measurements: Mapping[str, Measurement], levels: Iterable[int | float]
) -> dict[str, Nudge]:
    """An x position per measurement: a single-level measurement (``single``) is moved a
    little right, so that it does not hide the sweep's point at the same level."""
    ordered = sorted(set(levels)) or [1]
    step = max(ordered[-1] - ordered[0], 1) * 0.035

    def shifted(c: int | float) -> float:
        return c * 2**0.12 if concurrency_scale(ordered) == "log" else c + step

    multi = any(len(m.by_concurrency()) > 1 for m in measurements.values())
    return {
        name: shifted if multi and len(m.by_concurrency()) <= 1 else float
        for name, m in measurements.items()
    }


def draw_points(
    ax: Any,
    points: list[Point],
    *,
    label: str,
    color: str,
    factor: float,
    legend: Legend,
    nudge: Nudge = float,
    runs_label: str | None = None,
    p99_label: str | None = None,
    style: str = "-",
    marker: str = "o",
) -> None:
    """Medians as a line with markers (a lone marker for one level); optionally each
    run's value as a dot and the p99 (the gated figure) as a lighter dashed line."""
    if not points:
        return
    xs = [nudge(p.concurrency) for p in points]
    many = len(points) > 1
    if runs_label:
        ax.scatter(
            [nudge(p.concurrency) for p in points for _ in p.runs],
            [v * factor for p in points for v in p.runs],
            s=14,
            color=color,
            alpha=0.35,
            linewidths=0,
            zorder=3,
            label=legend.label(runs_label),
        )
    ax.plot(
        xs,
        [p.median * factor for p in points],
        linestyle=style if many else "none",
        marker=marker if many else "D",
        markersize=6 if many else 8,
        color=color,
        zorder=4,
        label=legend.label(label),
    )
    if p99_label and any(p.p99 is not None for p in points):
        ax.plot(
            xs,
            [math.nan if p.p99 is None else p.p99 * factor for p in points],
            linestyle="--" if many else "none",
            marker="v",
            markersize=5,
            color=color,
            alpha=0.45,
            zorder=3,
            label=legend.label(p99_label),
        )


def draw_baseline(
    ax: Any,
    checks: list[tuple[int | float, Check]],
    *,
    name: str,
    color: str,
    factor: float,
    legend: Legend,
    nudge: Nudge = float,
) -> None:
    """The baseline as a dashed line, shaded to its limit (the worst acceptable value)."""
    judged = [(c, ch.baseline, ch.limit) for c, ch in checks if ch.baseline is not None]
    if not judged:
        return
    xs = [nudge(c) for c, _, _ in judged]
    base = [b * factor for _, b, _ in judged]
    limit = [math.nan if lim is None else lim * factor for _, _, lim in judged]
    band = legend.label(f"{name}: tolerance band (baseline to limit)")
    if len(judged) > 1:
        ax.plot(
            xs,
            base,
            linestyle="--",
            color=color,
            alpha=0.8,
            zorder=2,
            label=legend.label(f"{name}: baseline"),
        )
        ax.fill_between(xs, base, limit, color=color, alpha=0.13, linewidth=0, zorder=1, label=band)
        return
    ax.plot(
        xs,
        base,
        linestyle="none",
        marker="_",
        markersize=22,
        markeredgewidth=2,
        color=color,
        alpha=0.8,
        zorder=2,
        label=legend.label(f"{name}: baseline"),
    )
    if not math.isnan(limit[0]):
        ax.vlines(xs, base, limit, linewidth=12, color=color, alpha=0.15, zorder=1, label=band)


def draw_marks(
    ax: Any,
    checks: list[tuple[int | float, Check]],
    *,
    factor: float,
    legend: Legend,
    nudge: Nudge = float,
) -> None:
    """A mark on each figure whose verdict is worth one: at the measured value, or at
    the baseline value where the figure is missing."""
    for c, check in checks:
        style = MARKS.get(check.verdict)
        value = check.measured if check.measured is not None else check.baseline
        if style is None or value is None:
            continue
        ax.scatter(
            [nudge(c)],
            [value * factor],
            zorder=6,
            linewidths=2 if check.verdict in ("missing", "improved") else 0.5,
            label=legend.label(MARK_LABELS[check.verdict]),
            **style,
        )


def draw_not_run(ax: Any, measurements: Mapping[str, Measurement], legend: Legend) -> None:
    """A dotted vertical line at each level that did not run, named at the top."""
    for name, m in measurements.items():
        for c in m.not_run:
            ax.axvline(
                c,
                color="#999999",
                linestyle=":",
                linewidth=1.5,
                zorder=1,
                label=legend.label("level not run"),
            )
            ax.text(
                c,
                0.97,
                f"{name} C={c} not run ",
                transform=ax.get_xaxis_transform(),
                rotation=90,
                va="top",
                ha="right",
                fontsize="small",
                color="#555555",
            )


def suptitle(fig: Any, what: str, run: RunRecord, extra: list[str] | None = None) -> None:
    """What the plot shows, the run, then notes (in red when the run failed)."""
    fig.suptitle(
        "\n".join([what, run_title(run), *(extra or [])]),
        fontsize=11,
        color="#b00020" if run_failed(run) else "black",
    )


def aborted(measurements: Mapping[str, Measurement]) -> list[str]:
    """A note line per measurement that stopped early, with why (shortened past 140 characters)."""
    lines = []
    for name, m in measurements.items():
        if m.aborted:
            text = f"{name} stopped early: {m.aborted}"
            lines.append(text if len(text) <= 140 else text[:137] + "...")
    return lines


def empty_note(ax: Any, text: str) -> None:
    """Grey text in the middle of empty axes, saying why they are empty."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#555555")


def save(plt: Any, fig: Any, path: Path) -> Path:
    """Write the figure as a PNG at ``path``, close it, and return the path."""
    try:
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path
