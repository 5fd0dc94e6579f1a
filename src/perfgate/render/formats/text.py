"""``text``: each measurement's tables, recomputed from the run's raw records."""

from __future__ import annotations

from perfgate.render.formats import Context, Format, register
from perfgate.render.table import render_table
from perfgate.results.run import RunRecord


def text_report(run: RunRecord, context: Context) -> str:
    """The header line, then each measurement's tables (no baseline)."""
    lines = [
        f"{context.run_json}: profile {run.profile.get('name')}, {run.engine} "
        f"{run.engine_version}, status {run.status}"
    ]
    for name, measurement in run.measurements.items():
        records = sum(len(lv.records) for lv in measurement.levels)
        lines.append(f"[{name}] (metrics recomputed from {records} raw records)")
        lines.append(render_table(name, measurement.recomputed(), None))
    return "\n".join(lines) + "\n"


register(
    Format(
        "text",
        "the tables, recomputed from the raw records (the default)",
        text_report,
        suffix=".txt",
    )
)
