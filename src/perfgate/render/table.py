"""The terminal tables and the CSV export: rendering only, from the figures' one
definition (:mod:`perfgate.gate.figures`). Decides nothing."""

from __future__ import annotations

import csv
import io
from collections.abc import Collection, Mapping

from perfgate.gate.baseline import Baseline
from perfgate.gate.figures import (
    CHOSEN,
    FIGURES,
    SERVER_FIGURES,
    Figure,
    delta_pct,
    delta_text,
    number_cell,
)
from perfgate.gate.values import figure_key, parse_key, search_values
from perfgate.measure.data import LevelData, Measurement
from perfgate.results.run import RunRecord
from perfgate.stats.distributions import median


def _fmt(value: float | None, width: int, decimals: int) -> str:
    return number_cell(value, width, decimals)


def table_figures() -> tuple[list[Figure], list[Figure]]:
    """The default figures' columns: those always shown (before the counts), and the
    sparse ones, shown after them where some level read them."""
    return [f for f in FIGURES if not f.sparse], [f for f in FIGURES if f.sparse]


def table_header(level_title: str = "C") -> str:
    """The concurrency table's header, up to the counts."""
    main, _ = table_figures()
    return (
        f"{level_title:>4} | "
        + " | ".join(f"{f.title:>{f.width}}" for f in main)
        + f" | {'Tokens':>8} | {'Wall(s)':>8} | {'Ok':>4} | {'Fail':>4}"
    )


def _lag(runs: list[LevelData]) -> tuple[float | None, bool]:
    """The level's harness timing error in ms (largest loop-lag p99 of its runs), and
    whether it is above the bound."""
    stats = [r.harness for r in runs if r.harness is not None]
    if not stats:
        return None, False
    worst = max(stats, key=lambda h: h.error_bound_s)
    return worst.error_bound_s * 1000, worst.over_bound


Row = dict[str, float | int | str | None]


def table_rows(measurement: str, data: Measurement, expected: Mapping[str, float]) -> list[Row]:
    """The table's rows, one per level (levels not run included), as values: each figure
    the median over the level's runs of the run's value (what the gate judges,
    :mod:`perfgate.gate.figures`), tokens, wall time and counts summed over the runs, the
    harness's timing error, and per figure its baseline value (``expected``, by figure
    key) and Δ%. The terminal table and the CSV export are both made from these."""
    rows: list[Row] = []
    levels = data.by_concurrency()
    for c in sorted({*levels, *data.not_run}):
        runs = levels.get(c, [])
        row: Row = {"measurement": measurement, "concurrency": c, "runs": len(runs)}
        for f in FIGURES:
            values = f.run_values(runs)
            row[f.name] = median(values) if values else None
        lag, over = _lag(runs)
        row |= gpu_columns(runs)
        row |= {
            "output_tokens": sum(r.metrics.output_tokens for r in runs),
            "wall_s": sum(r.metrics.wall_s for r in runs),
            "ok": sum(r.metrics.ok for r in runs),
            "fail": sum(r.metrics.fail for r in runs),
            "lag_ms": lag,
            "lag_over_bound": over,
            "not_run": c in data.not_run,
        }
        for f in FIGURES:
            base = expected.get(figure_key(measurement, c, f.name))
            row[f"baseline_{f.name}"] = base
            row[f"delta_pct_{f.name}"] = delta_pct(_num(row[f.name]), base)
        rows.append(row)
    return rows


def _known_median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median(known) if known else None


def gpu_columns(runs: list[LevelData]) -> Row:
    """A level's GPU telemetry (NVML): the median of its runs' mean utilisation, and
    joules per output token over its runs (None where nothing was read)."""
    read = [r.gpu for r in runs if r.gpu is not None]
    tokens = sum(r.metrics.output_tokens for r in runs if r.gpu is not None)
    energy = [t.energy_j for t in read]
    joules = None
    if read and tokens and all(e is not None for e in energy):
        joules = sum(e or 0.0 for e in energy) / tokens
    util = _known_median([t.util_mean_pct for t in read])
    return {"gpu_util_pct": util, "joules_per_token": joules}


def gpu_table(data: Measurement) -> str:
    """One row per level whose runs read the GPUs: mean utilisation, most memory used,
    mean power and SM clock (medians over the runs), and energy per output token ('' when
    no level did)."""
    levels = {c: runs for c, runs in data.by_concurrency().items() if any(r.gpu for r in runs)}
    if not levels:
        return ""
    header = (
        f"{_level_title(data):>4} | {'GPU util%':>9} | {'Mem(MiB)':>9} | {'Power(W)':>8} | "
        f"{'SM(MHz)':>7} | {'J/tok':>7}"
    )
    lines = [header, "-" * len(header)]
    for c in sorted(levels):
        read = [r.gpu for r in levels[c] if r.gpu is not None]
        cols = gpu_columns(levels[c])
        memory = max((g.memory_used_max_mib for t in read for g in t.gpus), default=None)
        power = _known_median([sum(g.power_mean_w or 0.0 for g in t.gpus) for t in read])
        clock = _known_median([g.sm_clock_mean_mhz for t in read for g in t.gpus])
        util, joules = _num(cols["gpu_util_pct"]), _num(cols["joules_per_token"])
        lines.append(
            f"{c:>4g} | {_fmt(util, 9, 1)} | {_fmt(memory, 9, 0)} | {_fmt(power, 8, 1)} | "
            f"{_fmt(clock, 7, 0)} | {_fmt(joules, 7, 3)}"
        )
    return "\n".join(lines)


def server_table(data: Measurement) -> str:
    """One row per level whose runs read the server's metrics: its queue (mean, peak),
    requests running at most, KV cache at its fullest, preemptions, prefix-cache hit rate
    and own token rate (the server figures, medians over the runs), its count of generated
    tokens against the client's, and the sampler's own CPU share ('' when no level did)."""
    levels = {c: runs for c, runs in data.by_concurrency().items() if any(r.server for r in runs)}
    if not levels:
        return ""
    figures = list(SERVER_FIGURES)
    header = (
        f"{_level_title(data):>4} | "
        + " | ".join(f"{f.title:>{f.width}}" for f in figures[:2])
        + f" | {'Running':>7} | "
        + " | ".join(f"{f.title:>{f.width}}" for f in figures[2:])
        + f" | {'Server/client tok':>17} | {'Samples':>7} | {'Sampler CPU':>11}"
    )
    lines = [header, "-" * len(header)]
    for c in sorted(levels):
        runs = levels[c]
        series = [r.server for r in runs if r.server is not None]
        cells = [f.cell(_known_median([f.value(r) for r in runs])) for f in figures]
        running = _known_median([s.peak("running") for s in series])
        server = [s.generated_tokens for s in series]
        client = sum(r.metrics.output_tokens for r in runs if r.server is not None)
        tokens = (
            f"{sum(t or 0.0 for t in server):.0f}/{client}"
            if all(t is not None for t in server)
            else f"-/{client}"
        )
        cpu = _known_median([s.cpu_share() for s in series])
        cpu_text = "-" if cpu is None else f"{cpu:.2%}"
        lines.append(
            f"{c:>4g} | {' | '.join(cells[:2])} | {_fmt(running, 7, 0)} | "
            f"{' | '.join(cells[2:])} | {tokens:>17} | {sum(s.samples for s in series):>7} | "
            f"{cpu_text:>11}"
        )
    return "\n".join(lines)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _level_title(data: Measurement) -> str:
    """The level column's title: C (concurrency), or Rate (requests a second, open loop)."""
    return "Rate" if any(lv.rate is not None for lv in data.levels) else "C"


def chosen_table(
    measurement: str, data: Measurement, baseline: Baseline | None, chosen: Collection[str]
) -> str:
    """The figures a profile chose besides the default ones (percentiles, req/s), one row
    per level: the median over the level's runs, and with a baseline its value and Δ%
    ('' when none was chosen)."""
    figures = [f for f in CHOSEN if f.name in chosen]
    if not figures:
        return ""
    expected = baseline.metrics if baseline else {}
    cells = [f"{_level_title(data):>4}"]
    for f in figures:
        cells.append(f"{f.title:>14}" + (f" | {'Base':>10} | {'Δ%':>6}" if baseline else ""))
    lines = [" | ".join(cells)]
    lines.append("-" * len(lines[0]))
    levels = data.by_concurrency()
    for c in sorted(levels):
        cells = [f"{c:>4g}"]
        for f in figures:
            values = f.run_values(levels[c])
            value = median(values) if values else None
            cell = f.cell(value)
            if baseline:
                exp = expected.get(figure_key(measurement, c, f.name))
                base = exp.value if exp else None
                cell += f" | {f.cell(base, 10)} | {delta_text(delta_pct(value, base)):>6}"
            cells.append(cell)
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def search_table(measurement: str, data: Measurement, baseline: Baseline | None) -> str:
    """A capacity measurement: each search's probes in order (level, requests, slo_met,
    TTFT and latency p99, met or missed) and what it found, then the capacity figure's
    median over the searches against the baseline."""
    header = (
        f"{'Search':>6} | {'Level':>12} | {'Requests':>8} | {'SLO met':>7} | "
        f"{'TTFT p99(s)':>11} | {'Latency p99(s)':>14} | Target"
    )
    lines = [header, "-" * len(header)]
    for i, search in enumerate(data.searches, 1):
        for probe in search.probes:
            lines.append(
                f"{i:>6} | {search.level_text(probe.level):>12} | {probe.goodput.requests:>8} | "
                f"{_fmt(probe.goodput.met_share, 7, 2)} | {_fmt(probe.ttft_p99_s, 11, 3)} | "
                f"{_fmt(probe.latency_p99_s, 14, 3)} | {'met' if probe.met else 'missed'}"
            )
        lines.append(f"{i:>6} | {search.describe().split(';')[0]}")
    expected = baseline.metrics if baseline else {}
    for key, values in search_values(measurement, data).items():
        figure = parse_key(key).figure
        line = f"{figure.title}: {median(values):g} {figure.unit} (median of {len(values)})"
        if (exp := expected.get(key)) is not None:
            delta = delta_text(delta_pct(median(values), exp.value))
            line += f"; baseline {exp.value:g} {exp.unit} ({delta}%)"
        lines.append(line)
    return "\n".join(lines)


def render_table(
    measurement: str,
    data: Measurement,
    baseline: Baseline | None,
    chosen: Collection[str] = (),
) -> str:
    """The concurrency table in the seeds' format, one row per level (:func:`table_rows`),
    and below it the ``chosen`` figures' table (:func:`chosen_table`).

    Tokens and Wall are summed over the runs. Lag is the harness's timing error bound
    (``!``: above 2 ms). With a baseline: its value and Δ% per figure.
    """
    if data.searches:
        return search_table(measurement, data, baseline)
    expected = {k: e.value for k, e in baseline.metrics.items()} if baseline else {}
    rows = table_rows(measurement, data, expected)
    main, sparse = table_figures()
    shown = [f for f in sparse if any(row[f.name] is not None for row in rows)]
    header = table_header(_level_title(data)) + f" | {'Runs':>4} | {'Lag(ms)':>7}"
    if baseline:
        header += "".join(f" | {'Base ' + f.title:>15} | {'Δ%':>6}" for f in main)
    header += "".join(f" | {f.title:>{f.width}}" for f in shown)
    lines = [header, "-" * len(header)]
    for row in rows:
        c = row["concurrency"]
        if row["not_run"]:
            lines.append(f"{c:>4g} | {'not run':>10} |")
            continue
        line = f"{c:>4g} | " + " | ".join(f.cell(_num(row[f.name])) for f in main)
        lag = _num(row["lag_ms"])
        lag_text = "-" if lag is None else f"{lag:.2f}" + ("!" if row["lag_over_bound"] else "")
        line += (
            f" | {row['output_tokens']:>8} | {_num(row['wall_s']) or 0.0:>8.2f} | "
            f"{row['ok']:>4} | {row['fail']:>4} | {row['runs']:>4} | {lag_text:>7}"
        )
        if baseline:
            for f in main:
                delta = delta_text(_num(row[f"delta_pct_{f.name}"]))
                line += f" | {f.cell(_num(row[f'baseline_{f.name}']), 15)} | {delta:>6}"
        line += "".join(f" | {f.cell(_num(row[f.name]))}" for f in shown)
        lines.append(line)
    if extra := chosen_table(measurement, data, baseline, chosen):
        lines += ["", extra]
    if gpus := gpu_table(data):
        lines += ["", gpus]
    if server := server_table(data):
        lines += ["", "the server's own metrics:", server]
    return "\n".join(lines)


def csv_text(run: RunRecord) -> str:
    """Every measurement's table as CSV (one row per level; figures recomputed from the
    raw records; baselines from the run's judged checks)."""
    expected = {c.key: c.baseline for c in run.checks if c.baseline is not None}
    rows = [
        row
        for name, m in run.measurements.items()
        for row in table_rows(name, m.recomputed(), expected)
    ]
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()
