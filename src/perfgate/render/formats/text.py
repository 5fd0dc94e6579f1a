"""``text``: each measurement's tables, recomputed from the run's raw records."""

from __future__ import annotations

from perfgate.render.ab import ab_table
from perfgate.render.formats import Context, Format, register
from perfgate.render.table import render_table
from perfgate.results.run import RunRecord


def text_report(run: RunRecord, context: Context) -> str:
    """The header line, then each measurement's tables (no baseline); for a side-by-side
    run (B's record holding A's as its ``reference``), A's tables too, then the A/B
    table of its paired checks."""
    lines = [
        f"{context.run_json}: profile {run.profile.get('name')}, {run.engine} "
        f"{run.engine_version}, status {run.status}"
    ]
    sides = [("", run)] if run.reference is None else [("B ", run), ("A ", run.reference)]
    for side, record in sides:
        for name, measurement in record.measurements.items():
            records = sum(len(lv.records) for lv in measurement.levels)
            lines.append(f"{side}[{name}] (metrics recomputed from {records} raw records)")
            lines.append(render_table(name, measurement.recomputed(), None))
    if run.reference is not None:
        lines += [ab_table(name, run.checks) for name in run.measurements]
    return "\n".join(lines) + "\n"


register(
    Format(
        "text",
        "the tables, recomputed from the raw records (the default)",
        text_report,
        suffix=".txt",
    )
)
