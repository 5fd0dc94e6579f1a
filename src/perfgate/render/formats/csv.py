"""``csv``: every measurement's table as CSV, one row per level."""

from __future__ import annotations

from perfgate.render.formats import Context, Format, register
from perfgate.render.table import csv_text
from perfgate.results.run import RunRecord


def csv_report(run: RunRecord, context: Context) -> str:
    """:func:`~perfgate.render.table.csv_text` of the run."""
    return csv_text(run)


register(Format("csv", "the tables as CSV, one row per level", csv_report))
