"""PNG plots of a run (matplotlib, the optional ``plots`` extra). Renders only.

:func:`render_run_plots` writes, for a run JSON:

- ``<stem>.throughput.png``: aggregate tok/s against concurrency (median of the runs,
  each run a dot), the baseline with its tolerance band, failed figures marked;
- ``<stem>.latency.png``: TTFT and TPOT against concurrency (median and p99, as gated);
- ``<stem>.distribution.png``: per-request end-to-end latency per level (box plots);
- ``<stem>.vs-baseline.png`` (given the baseline's recorded run): both runs' curves on
  the same axes.

Figures are recomputed from the run's raw records, as ``perfgate report`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from perfgate.errors import PerfgateError
from perfgate.gate.figures import BY_NAME, parse_key
from perfgate.gate.verdict import Check
from perfgate.measure.metrics import Measurement
from perfgate.results.run import RunRecord, load_run
from perfgate.stats import median

INSTALL_HINT = "pip install 'perfgate[plots]'"
DPI = 110
SIZE = (11.0, 6.2)  # inches: 1210 x 682 pixels at DPI
WIDE = (13.0, 6.2)  # two panels side by side
BASELINE_RUN_COLOR = "#7f7f7f"
# how a check's verdict is marked (only the verdicts worth a mark)
MARKS: dict[str, dict[str, Any]] = {
    "regressed": {"marker": "X", "color": "#d62728", "s": 120},
    "untrusted": {"marker": "X", "color": "#ff7f0e", "s": 120},
    "too-noisy": {"marker": "P", "color": "#9467bd", "s": 120},
    "missing": {"marker": "s", "facecolors": "none", "edgecolors": "#d62728", "s": 110},
    "improved": {"marker": "^", "facecolors": "none", "edgecolors": "#2ca02c", "s": 150},
}
MARK_LABELS = {
    "regressed": "regressed",
    "untrusted": "untrusted (timing error)",
    "too-noisy": "too noisy to decide",
    "missing": "missing (at baseline value)",
    "improved": "improved",
}
Scale = Literal["log", "linear"]
Nudge = Callable[[int], float]


class PlotsUnavailable(PerfgateError):
    """matplotlib is not installed."""


def require_matplotlib() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or a clear error saying
    how to install it."""
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable(
            f"plots need matplotlib, which is not installed: {INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


# -- pure helpers -------------------------------------------------------------------------


def concurrency_scale(levels: Iterable[int]) -> Scale:
    """Log scale for a concurrency axis spanning a factor of 10 or more, else linear."""
    values = [c for c in levels if c > 0]
    if not values:
        return "linear"
    return "log" if max(values) / min(values) >= 10 else "linear"


def run_stem(path: Path) -> str:
    """A run file's name without ``.json`` or ``.json.gz``."""
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def run_title(run: RunRecord) -> str:
    """Profile, engine and version, hardware key and status of a run, on one line."""
    profile = run.profile.get("name", "unknown profile")
    hardware = run.hardware.get("key") or "unknown hardware"
    return f"{profile} · {run.engine} {run.engine_version} · {hardware} · {run.status.upper()}"


def run_failed(run: RunRecord) -> bool:
    """Whether the run failed: its status, or a check that fails the build."""
    return run.status == "failed" or any(c.failed for c in run.checks)


def load_baseline_run(run: RunRecord, root: Path) -> RunRecord | None:
    """The run the gating baseline was recorded from (``run.baseline.run_json`` relative to
    ``root``); None when the run names none or it is missing or unreadable."""
    if run.baseline is None or not run.baseline.run_json:
        return None
    path = Path(run.baseline.run_json)
    if not path.is_absolute():
        path = root / path
    try:
        return load_run(path)
    except (PerfgateError, OSError, ValueError, EOFError):
        return None


@dataclass(frozen=True)
class Point:
    """One level of one quantity: a value per run, their median, and (TTFT, TPOT) the
    median over the runs of each run's p99: the gated ``*_p99_s`` figure."""

    concurrency: int
    runs: list[float]
    median: float
    p99: float | None = None


def figure_points(measurement: Measurement, figure: str) -> list[Point]:
    """A gated figure's per-run values at each level (levels without any left out)."""
    points = []
    for c, runs in sorted(measurement.by_concurrency().items()):
        values = BY_NAME[figure].run_values(runs)
        if values:
            points.append(Point(c, values, median(values)))
    return points


def _quantity_points(measurement: Measurement, median_figure: str, p99_figure: str) -> list[Point]:
    """Per level: each run's value of ``median_figure``, their median, and the median
    over the runs of ``p99_figure``: the gated figures, as the gate judges them."""
    points = []
    for c, runs in sorted(measurement.by_concurrency().items()):
        values = BY_NAME[median_figure].run_values(runs)
        if values:
            p99s = BY_NAME[p99_figure].run_values(runs)
            points.append(Point(c, values, median(values), median(p99s) if p99s else None))
    return points


def ttft_points(measurement: Measurement) -> list[Point]:
    """TTFT (s) per level: the runs' medians (``ttft_s``) and their p99 (``ttft_p99_s``)."""
    return _quantity_points(measurement, "ttft_s", "ttft_p99_s")


def tpot_points(measurement: Measurement) -> list[Point]:
    """TPOT (s) per level: each run's median (``tpot_p50_s``), their median, and their p99
    (``tpot_p99_s``)."""
    return _quantity_points(measurement, "tpot_p50_s", "tpot_p99_s")


def _checks_of(checks: Iterable[Check], measurement: str, figure: str) -> list[tuple[int, Check]]:
    """(concurrency, check) of one measurement's figure, by concurrency."""
    out = []
    for check in checks:
        try:
            key = parse_key(check.key)
        except ValueError:
            continue
        if key.measurement == measurement and key.figure.name == figure:
            assert key.concurrency is not None  # the plotted figures are per level
            out.append((key.concurrency, check))
    return sorted(out, key=lambda item: item[0])


def _levels(
    measurements: Mapping[str, Measurement], checks: Iterable[Check], figure: str
) -> set[int]:
    levels = {c for m in measurements.values() for c in (*m.by_concurrency(), *m.not_run)}
    for name in measurements:
        levels.update(c for c, _ in _checks_of(checks, name, figure))
    return levels


def _seconds_unit(values: Iterable[float | None]) -> tuple[str, float]:
    """ms for values under a second, else s: (unit, factor from seconds)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return ("ms", 1000.0) if not finite or max(finite) < 1.0 else ("s", 1.0)


# -- drawing ------------------------------------------------------------------------------


class _Legend:
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


def _concurrency_axis(ax: Any, levels: Iterable[int]) -> None:
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


def _ordered(measurements: Mapping[str, Measurement]) -> dict[str, Measurement]:
    """Measurements with more than one level (the sweep) first: they are the curves."""
    return dict(sorted(measurements.items(), key=lambda item: len(item[1].by_concurrency()) < 2))


def _nudges(measurements: Mapping[str, Measurement], levels: Iterable[int]) -> dict[str, Nudge]:
    """An x position per measurement: a single-level measurement (``single``) is moved a
    little right, so that it does not hide the sweep's point at the same level."""
    ordered = sorted(set(levels)) or [1]
    step = max(ordered[-1] - ordered[0], 1) * 0.035

    def shifted(c: int) -> float:
        return c * 2**0.12 if concurrency_scale(ordered) == "log" else c + step

    multi = any(len(m.by_concurrency()) > 1 for m in measurements.values())
    return {
        name: shifted if multi and len(m.by_concurrency()) <= 1 else float
        for name, m in measurements.items()
    }


def _draw_points(
    ax: Any,
    points: list[Point],
    *,
    label: str,
    color: str,
    factor: float,
    legend: _Legend,
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


def _draw_baseline(
    ax: Any,
    checks: list[tuple[int, Check]],
    *,
    name: str,
    color: str,
    factor: float,
    legend: _Legend,
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


def _draw_marks(
    ax: Any,
    checks: list[tuple[int, Check]],
    *,
    factor: float,
    legend: _Legend,
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


def _draw_not_run(ax: Any, measurements: Mapping[str, Measurement], legend: _Legend) -> None:
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


def _suptitle(fig: Any, what: str, run: RunRecord, extra: list[str] | None = None) -> None:
    """What the plot shows, the run, then notes (in red when the run failed)."""
    fig.suptitle(
        "\n".join([what, run_title(run), *(extra or [])]),
        fontsize=11,
        color="#b00020" if run_failed(run) else "black",
    )


def _aborted(measurements: Mapping[str, Measurement]) -> list[str]:
    lines = []
    for name, m in measurements.items():
        if m.aborted:
            text = f"{name} stopped early: {m.aborted}"
            lines.append(text if len(text) <= 140 else text[:137] + "...")
    return lines


def _empty_note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#555555")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    try:
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path


def _throughput(
    plt: Any, run: RunRecord, measurements: Mapping[str, Measurement], path: Path
) -> Path:
    fig, ax = plt.subplots(figsize=SIZE, layout="constrained")
    legend = _Legend()
    levels = _levels(measurements, run.checks, "agg_tok_s")
    nudges = _nudges(measurements, levels)
    for i, (name, m) in enumerate(measurements.items()):
        color, nudge = f"C{i}", nudges[name]
        checks = _checks_of(run.checks, name, "agg_tok_s")
        _draw_baseline(ax, checks, name=name, color=color, factor=1.0, legend=legend, nudge=nudge)
        _draw_points(
            ax,
            figure_points(m, "agg_tok_s"),
            label=f"{name}: median of runs",
            runs_label=f"{name}: each run",
            color=color,
            factor=1.0,
            legend=legend,
            nudge=nudge,
        )
        _draw_marks(ax, checks, factor=1.0, legend=legend, nudge=nudge)
    _draw_not_run(ax, measurements, legend)
    if not any(m.levels for m in measurements.values()):
        _empty_note(ax, "nothing was measured")
    _concurrency_axis(ax, levels)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("aggregate output tok/s (all requests of a level)")
    _suptitle(fig, "Aggregate throughput against concurrency", run, _aborted(measurements))
    legend.place(fig, [ax])
    return _save(plt, fig, path)


def _latency(plt: Any, run: RunRecord, measurements: Mapping[str, Measurement], path: Path) -> Path:
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=WIDE, layout="constrained")
    legend = _Legend()
    ttft = {name: ttft_points(m) for name, m in measurements.items()}
    tpot = {name: tpot_points(m) for name, m in measurements.items()}
    checks = {name: _checks_of(run.checks, name, "ttft_s") for name in measurements}
    unit, factor = _seconds_unit(
        [v for pts in ttft.values() for p in pts for v in (p.median, p.p99)]
        + [v for cs in checks.values() for _, ch in cs for v in (ch.baseline, ch.limit)]
    )
    levels = _levels(measurements, run.checks, "ttft_s")
    nudges = _nudges(measurements, levels)
    for i, name in enumerate(measurements):
        color, nudge = f"C{i}", nudges[name]
        _draw_baseline(
            ax_ttft, checks[name], name=name, color=color, factor=factor, legend=legend, nudge=nudge
        )
        for ax, points, scale in ((ax_ttft, ttft[name], factor), (ax_tpot, tpot[name], 1000.0)):
            _draw_points(
                ax,
                points,
                label=f"{name}: median of runs",
                runs_label=f"{name}: median of each run",
                p99_label=f"{name}: p99 (median of its runs' p99)",
                color=color,
                factor=scale,
                legend=legend,
                nudge=nudge,
            )
        _draw_marks(ax_ttft, checks[name], factor=factor, legend=legend, nudge=nudge)
    for ax in (ax_ttft, ax_tpot):
        _draw_not_run(ax, measurements, legend)
        _concurrency_axis(ax, levels)
        ax.set_ylim(bottom=0)
        if not any(m.levels for m in measurements.values()):
            _empty_note(ax, "nothing was measured")
    ax_ttft.set_title("Time to first token")
    ax_ttft.set_ylabel(f"TTFT ({unit})")
    ax_tpot.set_title("Time per output token after the first")
    ax_tpot.set_ylabel("TPOT (ms)")
    _suptitle(fig, "Latency against concurrency", run, _aborted(measurements))
    legend.place(fig, [ax_ttft, ax_tpot])
    return _save(plt, fig, path)


def _distribution(
    plt: Any, run: RunRecord, measurements: Mapping[str, Measurement], path: Path
) -> Path:
    shown = {name: m for name, m in measurements.items() if m.levels} or {"": Measurement()}
    fig, axes = plt.subplots(
        1,
        len(shown),
        figsize=SIZE,
        layout="constrained",
        sharey=True,
        width_ratios=[max(1, len(m.by_concurrency())) for m in shown.values()],
        squeeze=False,
    )
    unit, factor = _seconds_unit(
        [r.latency for m in shown.values() for lv in m.levels for r in lv.records if r.ok]
    )
    for i, (ax, (name, m)) in enumerate(zip(axes[0], shown.items(), strict=True)):
        groups = sorted(m.by_concurrency().items())
        data, positions, labels = [], [], []
        for pos, (c, runs) in enumerate(groups):
            ok = [r.latency * factor for lv in runs for r in lv.records if r.ok]
            failed = sum(1 for lv in runs for r in lv.records if not r.ok)
            label = f"C={c}\nn={len(ok)}\n{len(runs)} run{'s' if len(runs) > 1 else ''}"
            labels.append(label + (f"\n{failed} failed" if failed else ""))
            if ok:
                data.append(ok)
                positions.append(pos)
        if data:
            ax.boxplot(
                data,
                positions=positions,
                widths=0.55,
                patch_artist=True,
                boxprops={"facecolor": f"C{i}", "alpha": 0.35},
                medianprops={"color": "black", "linewidth": 1.5},
                flierprops={"marker": ".", "markersize": 4, "alpha": 0.5},
            )
        else:
            _empty_note(ax, "no successful request")
        ax.set_xticks(range(len(groups)), labels)
        ax.set_xlim(-0.6, max(len(groups), 1) - 0.4)
        ax.set_title(name)
        ax.grid(True, axis="y", alpha=0.3)
        if m.not_run:
            ax.text(
                0.98,
                0.97,
                "not run: " + ", ".join(f"C={c}" for c in m.not_run),
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize="small",
                color="#555555",
            )
    axes[0][0].set_ylabel(f"end-to-end request latency ({unit})")
    axes[0][0].set_ylim(bottom=0)
    fig.supxlabel(
        "concurrency level; n: successful requests, pooled over all runs of the level "
        "(box: quartiles and median; whiskers: 1.5 IQR; dots: outliers)",
        fontsize="small",
    )
    _suptitle(fig, "Per-request latency by concurrency level", run, _aborted(measurements))
    return _save(plt, fig, path)


def _vs_baseline(
    plt: Any,
    run: RunRecord,
    measurements: Mapping[str, Measurement],
    baseline_run: RunRecord,
    path: Path,
) -> Path:
    base = _ordered({n: m.recomputed() for n, m in baseline_run.measurements.items()})
    fig, (ax_tok, ax_ttft) = plt.subplots(1, 2, figsize=WIDE, layout="constrained")
    legend = _Legend()
    unit, factor = _seconds_unit(
        [
            p.median
            for ms in (measurements, base)
            for m in ms.values()
            for p in figure_points(m, "ttft_s")
        ]
    )
    who = {
        "baseline run": (base, BASELINE_RUN_COLOR, "--"),
        "this run": (measurements, "#d62728" if run_failed(run) else "C0", "-"),
    }
    for ax, figure, scale in ((ax_tok, "agg_tok_s", 1.0), (ax_ttft, "ttft_s", factor)):
        levels = _levels(measurements, run.checks, figure) | _levels(base, [], figure)
        for label, (ms, color, style) in who.items():
            nudges = _nudges(ms, levels)
            for j, (name, m) in enumerate(ms.items()):
                _draw_points(
                    ax,
                    figure_points(m, figure),
                    label=f"{label}: {name}",
                    color=color,
                    factor=scale,
                    legend=legend,
                    nudge=nudges[name],
                    style=style,
                    marker="os^D"[j % 4],
                )
        nudges = _nudges(measurements, levels)
        for name in measurements:
            failed = [(c, ch) for c, ch in _checks_of(run.checks, name, figure) if ch.failed]
            _draw_marks(ax, failed, factor=scale, legend=legend, nudge=nudges[name])
        _concurrency_axis(ax, levels)
        ax.set_ylim(bottom=0)
    ax_tok.set_title("Aggregate throughput (median of runs)")
    ax_tok.set_ylabel("aggregate output tok/s")
    ax_ttft.set_title("Time to first token (median of runs)")
    ax_ttft.set_ylabel(f"TTFT ({unit})")
    hardware = baseline_run.hardware.get("key") or "unknown hardware"
    recorded = (
        f"baseline run: {baseline_run.engine} {baseline_run.engine_version} on {hardware}, "
        f"recorded {baseline_run.created_at}"
    )
    _suptitle(fig, "This run against the baseline's recorded run", run, [recorded])
    legend.place(fig, [ax_tok, ax_ttft])
    return _save(plt, fig, path)


def not_by_concurrency(run: RunRecord) -> set[str]:
    """The run's measurements not drawn against concurrency: open-loop ones (request
    rates) and capacity searches, told by their data or by their checks' parsed levels."""
    out = {
        name
        for name, m in run.measurements.items()
        if m.searches or any(lv.rate is not None for lv in m.levels)
    }
    for check in run.checks:
        try:
            key = parse_key(check.key)
        except ValueError:
            continue
        if key.concurrency is None or isinstance(key.concurrency, float):
            out.add(key.measurement)
    return out


def render_run_plots(
    run: RunRecord, out_dir: Path, stem: str, *, baseline_run: RunRecord | None = None
) -> list[Path]:
    """Write a run's PNG plots into ``out_dir`` as ``<stem>.<plot>.png`` (``vs-baseline``
    only given the baseline's recorded run) and return their paths. Open-loop
    measurements (request rates) and capacity searches are left out: their levels are not
    concurrencies (:func:`not_by_concurrency`); with nothing left, no plot is written."""
    plt = require_matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    left_out = not_by_concurrency(run)
    measurements = {
        name: m.recomputed() for name, m in run.measurements.items() if name not in left_out
    }
    for check in run.checks:  # a baseline's measurement this run never ran: still drawn
        name = check.key.split(".", 1)[0]
        if name not in left_out:
            measurements.setdefault(name, Measurement())
    measurements = _ordered(measurements)
    if not measurements:
        return []  # nothing measured by concurrency (e.g. only request rates)
    written = [
        _throughput(plt, run, measurements, out_dir / f"{stem}.throughput.png"),
        _latency(plt, run, measurements, out_dir / f"{stem}.latency.png"),
        _distribution(plt, run, measurements, out_dir / f"{stem}.distribution.png"),
    ]
    if baseline_run is not None:
        path = out_dir / f"{stem}.vs-baseline.png"
        written.append(_vs_baseline(plt, run, measurements, baseline_run, path))
    return written
