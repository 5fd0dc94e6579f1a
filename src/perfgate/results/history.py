"""Run history: every run's gated figures, one JSON line per run.

A profile's history is ``<history-dir>/<profile>.jsonl`` (default ``.perfgate/history``);
CI can cache or commit it. Each line is a :class:`~perfgate.gate.creep.HistoryEntry`: the
run's provenance and, for each figure judged against a baseline, the measured value, the
baseline value and the verdict. Lines are appended whole, so a crash leaves at most a
partial last line, which :func:`load_history` skips and :func:`append_entry` repairs."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from perfgate.errors import PerfgateError
from perfgate.gate.creep import FigurePoint, HistoryEntry
from perfgate.results.run import RunRecord

DEFAULT_HISTORY_DIR = Path(".perfgate/history")


def entry_from_run(run: RunRecord, run_path: str) -> HistoryEntry | None:
    """The history entry of a finished run; None when it judged no figure against a
    baseline, or was interrupted or is still running."""
    if run.status in ("running", "interrupted"):
        return None
    figures: dict[str, FigurePoint] = {}
    for check in run.checks:
        if check.measured is None or check.baseline is None or check.delta_pct is None:
            continue  # not judged against a baseline figure
        figures[check.key] = FigurePoint(
            measured=check.measured,
            baseline=check.baseline,
            limit=check.limit,
            tolerance=check.tolerance,
            delta_pct=check.delta_pct,
            verdict=check.verdict,
            direction=check.direction,
            unit=check.unit,
        )
    if not figures:
        return None
    ref = run.baseline
    hardware = run.hardware.get("key") or (ref.hardware_key if ref else None)
    return HistoryEntry(
        created_at=run.created_at,
        profile=str(run.profile.get("name", "")),
        status=run.status,
        engine=run.engine,
        engine_version=run.engine_version,
        git_commit=run.git_commit,
        hardware_key=str(hardware) if hardware else None,
        baseline_tier=ref.tier if ref else None,
        baseline_path=ref.path if ref else None,
        run_json=run_path,
        figures=figures,
    )


def history_path(directory: Path, profile: str) -> Path:
    """Where a profile's history lives."""
    return directory / f"{profile}.jsonl"


def append_entry(path: Path, entry: HistoryEntry) -> None:
    """Append one entry as one JSON line, in a single write (creating the directory). A
    partial last line left by an earlier crash is dropped first, so none stays in the
    middle of the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (entry.model_dump_json() + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            _repair_tail(fd, size)
        view = memoryview(data)
        while view:  # one write on a local disk; the loop only guards a short write
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _repair_tail(fd: int, size: int) -> None:
    """End the file at a line break: a complete last line gets its newline, a partial one
    (a crash mid-write) is cut off."""
    text = os.pread(fd, size, 0)
    start = text.rfind(b"\n") + 1
    try:
        HistoryEntry.model_validate_json(text[start:])
    except ValidationError:
        os.ftruncate(fd, start)
    else:
        os.write(fd, b"\n")


def load_history(path: Path) -> list[HistoryEntry]:
    """Every entry of a history file, oldest first (a missing file is an empty history).
    A partial last line (a crash mid-write) is skipped; any other bad line is an error
    naming the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    last = len(lines) - 1  # the text after the final newline: "" unless cut short
    entries: list[HistoryEntry] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(HistoryEntry.model_validate_json(line))
        except ValidationError as exc:
            if number - 1 == last:
                continue  # written partly when a run crashed: not an entry
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(line)"
            raise PerfgateError(
                f"{path}:{number}: not a perfgate history entry ({where}: {first['msg']}); "
                "each line is one run: fix that line or delete it"
            ) from exc
    return entries
