"""The server log's lines a diagnosis attaches: those the seeds grepped for by hand."""

from __future__ import annotations

import re

MAX_LOG_LINES = 15


_NUMBERS = re.compile(r"\d+(?:[.,]\d+)*")


def matching_log_lines(log: str, grep: str, limit: int = MAX_LOG_LINES) -> list[str]:
    """Log lines matching ``grep`` (case-insensitive). A line repeated with other numbers
    (per-request timings, periodic metrics) is kept once, at its last occurrence; the
    last ``limit`` remain, each cut to 400 characters."""
    pattern = re.compile(grep, re.IGNORECASE)
    last_of_shape: dict[str, int] = {}
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("$ "):
            continue  # the command line perfgate wrote: facts cover it
        if pattern.search(line):
            last_of_shape[_NUMBERS.sub("#", line.strip())] = index
    kept = sorted(last_of_shape.values())[-limit:]
    return [lines[i].strip()[:400] for i in kept]
