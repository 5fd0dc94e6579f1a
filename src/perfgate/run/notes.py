"""What a run says once: a note in the run JSON, a line in the output, and (for what perfgate
could not do as usual) a warning repeated in the terminal summary."""

from __future__ import annotations

from collections.abc import Callable

from perfgate.results.run import RunRecord

Progress = Callable[[str], None]


class Notes:
    """The run's notes sink: every message is kept once in ``run.notes``, however often a
    part says it."""

    def __init__(self, run: RunRecord, progress: Progress) -> None:
        self.run = run
        self.progress = progress

    def _new(self, message: str) -> bool:
        if message in self.run.notes:
            return False
        self.run.notes.append(message)
        return True

    def keep(self, message: str) -> None:
        """Into the run JSON only (the output says it elsewhere)."""
        self._new(message)

    def say(self, message: str) -> None:
        """Into the run JSON, and printed once."""
        if self._new(message):
            self.progress(f"perfgate: {message}")

    def warn(self, message: str) -> None:
        """What perfgate could not do as usual: into the run JSON, printed once as a
        warning, and repeated in the terminal summary (``run.warnings``)."""
        if self._new(message):
            self.run.warnings.append(message)
            self.progress(f"perfgate: warning: {message}")
