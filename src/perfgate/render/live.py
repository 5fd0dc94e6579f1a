"""Progress of long steps for the person watching: in a terminal, a rich display updated
in place; in a log (CI), a few plain lines a step; under ``pytest -q``, nothing.

Shows only; decides nothing. Nothing here runs on its own thread: the display is
redrawn when the caller reports progress (a level's ticker, once a second, or each
counted prompt), inside ``screen()``, the caller's way to reach the real terminal
(pytest's capture suspended).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import IO, Literal

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

Mode = Literal["terminal", "plain", "quiet"]
PLAIN_EVERY_S = 30.0  # a plain progress line at most this often, in logs
REDRAW_EVERY_S = 0.2  # the terminal display is redrawn at most this often


def duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``1h02m``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class ProgressView:
    """Where progress goes. ``write`` prints one line; ``screen`` is entered around every
    terminal redraw (pytest: its output capture suspended)."""

    def __init__(
        self,
        write: Callable[[str], None],
        mode: Mode = "plain",
        *,
        screen: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
        file: IO[str] | None = None,
        width: int | None = None,
        plain_every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write
        self.mode = mode
        self.screen = screen
        self.file = file  # None: sys.stdout at each redraw (the real one, inside screen)
        self.width = width  # None: the terminal's
        self.plain_every_s = plain_every_s
        self.clock = clock
        self._shown: Task | None = None  # the step show() shows

    def message(self, text: str) -> None:
        """A line for the log (nothing when quiet)."""
        if self.mode != "quiet":
            self.write(text)

    def show(
        self, description: str, total: int, done: int, failed: int = 0, detail: str = ""
    ) -> None:
        """Progress of the running step, named by ``description``: a step of another name
        closes the one shown before (:meth:`close_shown` ends the last)."""
        task = self._shown
        if task is None or task.description != description:
            self.close_shown()
            task = self._shown = self.task(description, total)
        task.update(done, failed, detail)

    def close_shown(self) -> None:
        """Take the step :meth:`show` shows off the screen."""
        if self._shown is not None:
            self._shown.close()
            self._shown = None

    def task(self, description: str, total: int, *, unit: str = "requests") -> Task:
        """A step of ``total`` items, shown until it is closed."""
        return Task(self, description, total, unit)

    @contextlib.contextmanager
    def step(self, description: str, total: int, *, unit: str = "requests") -> Iterator[Task]:
        """:meth:`task`, closed at the end of the block (Ctrl-C included)."""
        task = self.task(description, total, unit=unit)
        try:
            yield task
        finally:
            task.close()


class Task:
    """One step's progress: ``update`` as items finish, ``close`` when it ends."""

    def __init__(self, view: ProgressView, description: str, total: int, unit: str) -> None:
        self.view = view
        self.description = description
        self.total = total
        self.unit = unit
        self.started = view.clock()
        self.done = 0
        self._last_line = self.started
        self._last_draw = float("-inf")
        self._progress: Progress | None = None
        self._task_id: object = None

    def status(self, done: int, failed: int = 0, detail: str = "") -> str:
        """``20/36 requests, 1 failed, ≈310 tok/s, 1m02s elapsed, ETA 40s``."""
        elapsed = self.view.clock() - self.started
        parts = [f"{done}/{self.total} {self.unit}"]
        if failed:
            parts.append(f"{failed} failed")
        if detail:
            parts.append(detail)
        parts.append(f"{duration(elapsed)} elapsed")
        if 0 < done < self.total:
            parts.append(f"ETA {duration(elapsed / done * (self.total - done))}")
        return ", ".join(parts)

    def update(self, done: int, failed: int = 0, detail: str = "") -> None:
        """``done`` of ``total`` items finished (``failed`` of them failed); ``detail``:
        e.g. a rate."""
        self.done = done
        view = self.view
        now = view.clock()
        if view.mode == "plain":
            if now - self._last_line >= view.plain_every_s and done < self.total:
                self._last_line = now
                view.write(f"perfgate:   {self.description}: {self.status(done, failed, detail)}")
            return
        if view.mode != "terminal" or now - self._last_draw < REDRAW_EVERY_S:
            return
        self._last_draw = now
        with view.screen():
            if self._progress is None:
                self._start()
            assert self._progress is not None
            status = self.status(done, failed, detail)
            self._progress.update(self._task_id, completed=done, status=status)  # type: ignore[arg-type]
            if not self._progress.live.is_started:
                self._progress.start()  # draws it
            else:
                self._progress.refresh()

    def _start(self) -> None:
        view = self.view
        console = Console(file=view.file, width=view.width, force_terminal=True, highlight=False)
        self._progress = Progress(
            TextColumn("perfgate: {task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[status]}"),
            console=console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
            get_time=view.clock,
        )
        self._task_id = self._progress.add_task(self.description, total=self.total, status="")

    def close(self) -> None:
        """Take the display off the screen (the caller writes the step's result line)."""
        if self._progress is not None:
            with self.view.screen():
                self._progress.stop()
            self._progress = None
