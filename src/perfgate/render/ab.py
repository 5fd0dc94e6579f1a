"""The side-by-side (A/B) table: rendering only, from the paired checks
(:mod:`perfgate.gate.ab`). Decides nothing."""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.gate.values import level_name, parse_key
from perfgate.gate.verdict import Check

HEADER = ("level", "figure", "A", "B", "B/A", "95% CI", "pairs", "verdict")


def ab_rows(name: str, checks: Sequence[Check]) -> list[tuple[str, ...]]:
    """One row per figure of measurement ``name``: its level, A's and B's medians, B/A's
    change, its interval, the pairs and the verdict."""
    rows: list[tuple[str, ...]] = []
    for check in checks:
        key = parse_key(check.key)
        if key.measurement != name:
            continue
        figure = key.figure
        level = level_name(key.concurrency) if key.concurrency is not None else "-"
        change = f"{check.delta_pct:+.1f}%" if check.delta_pct is not None else "-"
        interval = check.interval.removeprefix("B/A 95% CI ").split(",")[0]
        rows.append(
            (
                level,
                figure.name,
                figure.text(check.baseline),
                figure.text(check.measured),
                change,
                interval if "pairs" not in interval else "-",
                str(check.samples),
                check.verdict.upper().replace("-", " "),
            )
        )
    return rows


def ab_table(name: str, checks: Sequence[Check]) -> str:
    """The A/B table of one measurement, as fixed-width text."""
    rows = [HEADER, *ab_rows(name, checks)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [f"perfgate A/B: {name} (A: the reference, B: the candidate)"]
    for n, row in enumerate(rows):
        lines.append(" | ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)
