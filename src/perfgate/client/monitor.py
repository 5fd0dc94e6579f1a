"""The harness watches itself: how late its event loop runs, and how much CPU it uses.

A chunk that arrives while the loop is busy is timestamped when the loop gets round to
it. Every ``tick_s`` the monitor yields to the loop once and times how long the loop
takes to come back: everything ready runs first, as it would before a freshly arrived
chunk. To that it adds how late its timer woke beyond epoll's millisecond rounding: the
time the process did not run at all. That **loop lag** is the delay a timestamp may
carry; its 99th percentile is the level's **timing error bound**. The client's CPU
share says why: near one core, one event loop cannot keep up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

TICK_S = 0.005
EPOLL_ROUNDING_S = 0.001  # epoll rounds a timer's timeout up to whole milliseconds
LAG_BOUND_S = 0.002  # above this, a level's per-token timings are marked approximate


class HarnessStats(BaseModel):
    """The harness's own load and timing error during one level run."""

    loop_lag_p50_s: float = Field(description="Median time for the event loop to come back.")
    loop_lag_p99_s: float = Field(
        description="99th percentile of that time: the bound on how late a chunk's "
        "timestamp may be (the level's timing error bound)."
    )
    loop_lag_max_s: float = Field(description="Largest loop lag seen.")
    ticks: int = Field(description="Timer samples taken.")
    cpu_s: float = Field(description="CPU seconds the client processes used, together.")
    wall_s: float = Field(description="Seconds watched.")
    processes: int = Field(1, description="Client processes (each its own event loop).")
    clock_error_s: float = Field(
        0.0,
        description="How far client processes on other hosts (Ray actors) may have their "
        "timestamps off once converted to this process's clock: half the round trip of "
        "the best clock reading (0: all on this host's monotonic clock).",
    )

    @classmethod
    def merged(cls, shards: list[HarnessStats]) -> HarnessStats:
        """Several client processes' stats as one level's: the worst lag, all the CPU."""
        return cls(
            loop_lag_p50_s=max(h.loop_lag_p50_s for h in shards),
            loop_lag_p99_s=max(h.loop_lag_p99_s for h in shards),
            loop_lag_max_s=max(h.loop_lag_max_s for h in shards),
            ticks=sum(h.ticks for h in shards),
            cpu_s=sum(h.cpu_s for h in shards),
            wall_s=max(h.wall_s for h in shards),
            processes=sum(h.processes for h in shards),
            clock_error_s=max(h.clock_error_s for h in shards),
        )

    @property
    def cpu_share(self) -> float:
        """CPU seconds per wall second (1.0: one core busy)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def error_bound_s(self) -> float:
        """How late a timestamp of this level may be."""
        return self.loop_lag_p99_s + self.clock_error_s

    @property
    def over_bound(self) -> bool:
        """Whether the timing error exceeds :data:`LAG_BOUND_S`."""
        return self.error_bound_s > LAG_BOUND_S

    def describe(self) -> str:
        """One line: timing error and CPU."""
        processes = f" in {self.processes} processes" if self.processes > 1 else ""
        if self.clock_error_s > 0:
            processes += f" (clocks joined within {self.clock_error_s * 1000:.2f} ms)"
        return (
            f"harness lag p99 {self.loop_lag_p99_s * 1000:.2f} ms, "
            f"client CPU {self.cpu_share:.0%} of a core{processes}"
        )


class LoopMonitor:
    """Samples the running loop's lag every ``tick_s`` while in use::

    async with LoopMonitor() as monitor:
        ...  # the level
    stats = monitor.stats()
    """

    def __init__(
        self,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.tick_s = tick_s
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._start = self._cpu_start = self._end = self._cpu_end = 0.0

    async def _tick(self) -> None:
        while True:
            due = self.clock() + self.tick_s
            await asyncio.sleep(self.tick_s)
            yielded = self.clock()
            await asyncio.sleep(0)  # back of the ready queue, behind any arrived chunks
            back = self.clock()
            # a timer may wake up to EPOLL_ROUNDING_S late by itself; any more is time the
            # process did not run (descheduled, or a long callback): chunks wait that too
            stalled = max(0.0, yielded - due - EPOLL_ROUNDING_S)
            self.lags.append(stalled + back - yielded)

    async def __aenter__(self) -> LoopMonitor:
        self._start, self._cpu_start = self.clock(), self.cpu_clock()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._end, self._cpu_end = self.clock(), self.cpu_clock()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def stats(self) -> HarnessStats:
        """What was seen between entering and leaving."""
        lags = sorted(self.lags) or [0.0]
        return HarnessStats(
            loop_lag_p50_s=lags[len(lags) // 2],
            loop_lag_p99_s=lags[min(len(lags) - 1, int(0.99 * len(lags)))],
            loop_lag_max_s=lags[-1],
            ticks=len(self.lags),
            cpu_s=self._cpu_end - self._cpu_start,
            wall_s=self._end - self._start,
        )


def timing_warning(measurement: str, levels: list[tuple[str, HarnessStats]]) -> str | None:
    """One line on the level runs (named, e.g. ``C=4``) whose timing error passed
    :data:`LAG_BOUND_S` (None when none did), with the likely reason: a busy client, or a
    client left without a core."""
    over = [(c, h) for c, h in levels if h.over_bound]
    if not over:
        return None
    worst = max((h for _, h in over), key=lambda h: h.error_bound_s)
    where = ", ".join(dict.fromkeys(c for c, _ in over))
    busiest = max(h.cpu_share / h.processes for _, h in over)
    if busiest > 0.6:
        why = (
            "a client process is near a full core: more client processes "
            "(workload.client_processes) would keep up"
        )
    else:
        why = (
            f"the client used at most {busiest:.0%} of a core yet waited: it was left without "
            "a CPU (the server or another tenant busy on every core); run the client on "
            "other cores or another host"
        )
    return (
        f"{measurement}: the harness's timing error passed {LAG_BOUND_S * 1000:.0f} ms in "
        f"{len(over)} of {len(levels)} level runs ({where}; worst {worst.describe()}); "
        f"{why}. Per-token timings of those levels (TTFT, TPOT, ITL) carry it, and a timing "
        "verdict it could flip is UNTRUSTED"
    )
