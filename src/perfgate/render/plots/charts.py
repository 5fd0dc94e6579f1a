"""The run's PNG charts: throughput, latency, latency distribution, against the baseline."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.gate.figures import BY_NAME
from perfgate.gate.values import parse_key
from perfgate.measure.data import Measurement
from perfgate.render.plots.common import (
    BASELINE_RUN_COLOR,
    SIZE,
    WIDE,
    require_matplotlib,
    run_failed,
)
from perfgate.render.plots.draw import (
    Legend,
    aborted,
    concurrency_axis,
    curves_first,
    draw_baseline,
    draw_marks,
    draw_not_run,
    draw_points,
    empty_note,
    level_nudges,
    save,
    suptitle,
)
from perfgate.render.plots.points import (
    checks_of,
    figure_points,
    plotted_levels,
    seconds_unit,
    tpot_points,
    ttft_points,
)
from perfgate.results.run import RunRecord


def _throughput(
    plt: Any, run: RunRecord, measurements: Mapping[str, Measurement], path: Path
) -> Path:
    fig, ax = plt.subplots(figsize=SIZE, layout="constrained")
    legend = Legend()
    levels = plotted_levels(measurements, run.checks, "agg_tok_s")
    nudges = level_nudges(measurements, levels)
    for i, (name, m) in enumerate(measurements.items()):
        color, nudge = f"C{i}", nudges[name]
        checks = checks_of(run.checks, name, "agg_tok_s")
        draw_baseline(ax, checks, name=name, color=color, factor=1.0, legend=legend, nudge=nudge)
        draw_points(
            ax,
            figure_points(m, "agg_tok_s"),
            label=f"{name}: median of runs",
            runs_label=f"{name}: each run",
            color=color,
            factor=1.0,
            legend=legend,
            nudge=nudge,
        )
        draw_marks(ax, checks, factor=1.0, legend=legend, nudge=nudge)
    draw_not_run(ax, measurements, legend)
    if not any(m.levels for m in measurements.values()):
        empty_note(ax, "nothing was measured")
    concurrency_axis(ax, levels)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("aggregate output tok/s (all requests of a level)")
    suptitle(fig, "Aggregate throughput against concurrency", run, aborted(measurements))
    legend.place(fig, [ax])
    return save(plt, fig, path)


def _latency(plt: Any, run: RunRecord, measurements: Mapping[str, Measurement], path: Path) -> Path:
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=WIDE, layout="constrained")
    legend = Legend()
    ttft = {name: ttft_points(m) for name, m in measurements.items()}
    tpot = {name: tpot_points(m) for name, m in measurements.items()}
    checks = {name: checks_of(run.checks, name, "ttft_s") for name in measurements}
    unit, factor = seconds_unit(
        [v for pts in ttft.values() for p in pts for v in (p.median, p.p99)]
        + [v for cs in checks.values() for _, ch in cs for v in (ch.baseline, ch.limit)]
    )
    levels = plotted_levels(measurements, run.checks, "ttft_s")
    nudges = level_nudges(measurements, levels)
    for i, name in enumerate(measurements):
        color, nudge = f"C{i}", nudges[name]
        draw_baseline(
            ax_ttft, checks[name], name=name, color=color, factor=factor, legend=legend, nudge=nudge
        )
        for ax, points, scale in ((ax_ttft, ttft[name], factor), (ax_tpot, tpot[name], 1000.0)):
            draw_points(
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
        draw_marks(ax_ttft, checks[name], factor=factor, legend=legend, nudge=nudge)
    for ax in (ax_ttft, ax_tpot):
        draw_not_run(ax, measurements, legend)
        concurrency_axis(ax, levels)
        ax.set_ylim(bottom=0)
        if not any(m.levels for m in measurements.values()):
            empty_note(ax, "nothing was measured")
    ax_ttft.set_title("Time to first token")
    ax_ttft.set_ylabel(f"TTFT ({unit})")
    ax_tpot.set_title("Time per output token after the first")
    ax_tpot.set_ylabel("TPOT (ms)")
    suptitle(fig, "Latency against concurrency", run, aborted(measurements))
    legend.place(fig, [ax_ttft, ax_tpot])
    return save(plt, fig, path)


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
    unit, factor = seconds_unit(
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
            empty_note(ax, "no successful request")
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
    suptitle(fig, "Per-request latency by concurrency level", run, aborted(measurements))
    return save(plt, fig, path)


def _vs_baseline(
    plt: Any,
    run: RunRecord,
    measurements: Mapping[str, Measurement],
    baseline_run: RunRecord,
    path: Path,
) -> Path:
    base = curves_first({n: m.recomputed() for n, m in baseline_run.measurements.items()})
    fig, (ax_tok, ax_ttft) = plt.subplots(1, 2, figsize=WIDE, layout="constrained")
    legend = Legend()
    unit, factor = seconds_unit(
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
        levels = plotted_levels(measurements, run.checks, figure) | plotted_levels(base, [], figure)
        for label, (ms, color, style) in who.items():
            nudges = level_nudges(ms, levels)
            for j, (name, m) in enumerate(ms.items()):
                draw_points(
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
        nudges = level_nudges(measurements, levels)
        for name in measurements:
            failed = [(c, ch) for c, ch in checks_of(run.checks, name, figure) if ch.failed]
            draw_marks(ax, failed, factor=scale, legend=legend, nudge=nudges[name])
        concurrency_axis(ax, levels)
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
    suptitle(fig, "This run against the baseline's recorded run", run, [recorded])
    legend.place(fig, [ax_tok, ax_ttft])
    return save(plt, fig, path)


VERDICT_COLORS = {"pass": "#2ca02c", "improved": "#2ca02c", "regressed": "#d62728"}
AB_FIGURES = ("agg_tok_s", "per_request_tok_s", "ttft_s")


def _ab_ratios(
    plt: Any, run: RunRecord, measurements: Mapping[str, Measurement], path: Path
) -> Path:
    """A side-by-side run: B/A per level for each figure, with its 95% interval, the
    limits dashed, each point colored by its verdict (orange: too noisy)."""
    fig, axes = plt.subplots(1, len(AB_FIGURES), figsize=WIDE, layout="constrained")
    legend = Legend()
    for ax, figure in zip(axes, AB_FIGURES, strict=True):
        levels: set[int | float] = set()
        for name in measurements:
            for level, check in checks_of(run.checks, name, figure):
                if check.baseline is None or check.measured is None or not check.baseline:
                    continue
                levels.add(level)
                ratio = check.measured / check.baseline
                low = (check.low or check.measured) / check.baseline
                high = (check.high or check.measured) / check.baseline
                ax.errorbar(
                    [level], [100 * (ratio - 1)],
                    yerr=[[100 * max(0.0, ratio - low)], [100 * max(0.0, high - ratio)]],
                    fmt="o", color=VERDICT_COLORS.get(check.verdict, "#ff7f0e"), capsize=4,
                    label=legend.label(check.verdict.replace("-", " ")),
                )  # fmt: skip
                tolerance = check.tolerance or 0.0
                for bound in (-tolerance, tolerance):
                    ax.axhline(100 * bound, color="#555555", linestyle="--", linewidth=0.8)
        ax.axhline(0, color="black", linewidth=0.8)
        if levels:
            concurrency_axis(ax, levels)
        else:
            empty_note(ax, "no pairs")
        better = "higher is better" if BY_NAME[figure].direction == "higher" else "lower is better"
        ax.set_title(f"{figure}: B against A ({better})")
        ax.set_ylabel("B/A - 1 (%), median of pairs, 95% CI")
    a = run.reference
    who = f"A: {a.profile.get('name')} ({a.engine} {a.engine_version})" if a else "A"
    suptitle(fig, "B against A, side by side (runs interleaved A B B A)", run, [who])
    legend.place(fig, list(axes))
    return save(plt, fig, path)


def _server(plt: Any, run: RunRecord, path: Path) -> Path | None:
    """The server's queue (waiting, running) and KV-cache use through each level run, level
    runs one after another in measured order (None: no level read the server's metrics)."""
    runs = [(name, lv) for name, m in run.measurements.items() for lv in m.levels if lv.server]
    if not runs:
        return None
    fig, (queue, kv) = plt.subplots(2, 1, figsize=SIZE, layout="constrained", sharex=True)
    offset = 0.0
    drawn: set[str] = set()
    for name, lv in runs:
        series = lv.server
        assert series is not None
        times = [offset + t / 1000 for t in series.t_ms]
        for ax, word, color, scale in (
            (queue, "waiting", "C3", 1.0),
            (queue, "running", "C0", 1.0),
            (kv, "kv_usage", "C2", 100.0),
        ):
            values = series.gauges.get(word)
            if not values:
                continue
            shown = [None if v is None else v * scale for v in values]
            label = None if word in drawn else f"{word} ({series.sources.get(word, word)})"
            drawn.add(word)
            ax.step(times, shown, where="post", color=color, label=label)
        for ax in (queue, kv):
            ax.axvline(offset, color="0.8", linewidth=0.8, linestyle=":")
        level = f"C={lv.concurrency}" if lv.rate is None else f"{lv.rate:g}/s"
        queue.annotate(
            f"{name} {level} r{lv.repeat + 1}",
            (offset, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=90,
            va="top",
            ha="right",
            color="0.4",
        )
        offset = times[-1] + max(series.interval_s, 0.5) if times else offset
    queue.set_ylabel("requests")
    queue.set_ylim(bottom=0)
    kv.set_ylabel("KV cache in use (%)")
    kv.set_ylim(0, 105)
    kv.set_xlabel("seconds of measured requests, level runs one after another")
    if not drawn & {"waiting", "running"}:
        empty_note(queue, "the server reported no queue gauge")
    if "kv_usage" not in drawn:
        empty_note(kv, "the server reported no KV-cache use (see the run's notes)")
    for ax in (queue, kv):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    suptitle(fig, "The server's queue and KV cache through each level", run)
    return save(plt, fig, path)


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
    measurements = curves_first(measurements)
    if not measurements:
        return []  # nothing measured by concurrency (e.g. only request rates)
    written = [
        _throughput(plt, run, measurements, out_dir / f"{stem}.throughput.png"),
        _latency(plt, run, measurements, out_dir / f"{stem}.latency.png"),
        _distribution(plt, run, measurements, out_dir / f"{stem}.distribution.png"),
    ]
    if (server := _server(plt, run, out_dir / f"{stem}.server.png")) is not None:
        written.append(server)
    if baseline_run is not None:
        path = out_dir / f"{stem}.vs-baseline.png"
        written.append(_vs_baseline(plt, run, measurements, baseline_run, path))
    if run.reference is not None:  # a side-by-side run: B/A per level
        written.append(_ab_ratios(plt, run, measurements, out_dir / f"{stem}.b-over-a.png"))
    return written
