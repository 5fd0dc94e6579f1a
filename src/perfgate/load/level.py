"""Running load: one level, closed-loop at concurrency C or open-loop at a request rate.

A level is closed-loop: C workers each send their next request as soon as the
previous one ends, until N measured requests are done. Warmup requests run first
and are not measured.

Each worker has a connection of its own (:mod:`perfgate.load.workers`), kept across the
levels of a sweep. Before the clock starts, every body is encoded and each worker's
connection is open, so that neither lands in a request's TTFT. A :class:`LoopMonitor`
watches the harness's own lag and CPU during the measured requests, and the garbage
collector waits until they end.

A sweep of levels, over one client process or several, is :mod:`perfgate.load.sweep`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass, field
from typing import Literal

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats, LoopMonitor
from perfgate.client.stream import Unparsed
from perfgate.load.workers import RequestPlan, Workers, finished
from perfgate.workload.arrivals import Arrival, arrival_offsets
from perfgate.workload.prompts import Prompt

OnRecord = Callable[[int, RequestRecord], None]
Phase = Literal["warmup", "measure"]
Level = int | float  # a concurrency (closed loop), or a request rate in req/s (open loop)
PROGRESS_EVERY_S = 1.0  # how often a level's progress is shown while it runs


class Tally:
    """Requests of a level's phase finished so far, for a progress display: workers add
    to it (two integer additions a request); a display reads it on its own schedule."""

    def __init__(self, concurrency: int, counts: MutableSequence[int] | None = None) -> None:
        self.concurrency = concurrency
        self.phase: Phase = "warmup"
        self.total = 0
        self.started = time.perf_counter()
        # done, failed; a client process's are in memory shared with the main process
        self._counts = counts if counts is not None else [0, 0]

    def begin(self, phase: Phase, total: int) -> None:
        """A new phase of ``total`` requests starts now."""
        self.phase, self.total, self.started = phase, total, time.perf_counter()
        self._counts[0] = self._counts[1] = 0

    def add(self, failed: bool) -> None:
        """One request finished."""
        counts = self._counts
        counts[0] += 1
        counts[1] += failed

    @property
    def done(self) -> int:
        """Requests of this phase finished (failed ones included)."""
        return self._counts[0]

    @property
    def failed(self) -> int:
        """Requests of this phase that failed (a transport error or an HTTP error)."""
        return self._counts[1]


OnProgress = Callable[[Tally], None]


@dataclass
class LevelRun:
    """Raw result of one level: its records and its wall-clock window. An open-loop level
    has its request ``rate``; its ``concurrency`` is its cap on requests in flight (0:
    none)."""

    concurrency: int
    records: list[RequestRecord]
    start: float
    end: float
    warmup_records: list[RequestRecord] = field(default_factory=list)
    deadline_hit: bool = False
    harness: HarnessStats | None = None
    rate: float | None = None

    @property
    def wall_s(self) -> float:
        """Seconds from the first measured request's start to the last one's end."""
        return self.end - self.start


RoundRunner = Callable[[Callable[[], None], int], None]


def plain_rounds(one_round: Callable[[], None], rounds: int) -> None:
    """Run rounds one after another (pytest-benchmark's ``pedantic`` is the other runner)."""
    for _ in range(rounds):
        one_round()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection during measured requests (a full collection stalls the
    event loop for tens of milliseconds, and every chunk arriving meanwhile is stamped
    late); the young generations collected before, and the collector back on after. (A
    full collection before each run took 34 ms under pytest's heap: the harness's own
    time between runs, and nothing the run measures needs it.)"""
    was_enabled = gc.isenabled()
    gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


async def run_requests(
    workers: Workers,
    plan: RequestPlan,
    bodies: Sequence[bytes],
    concurrency: int,
    deadline: float,
    clock: Callable[[], float],
    tally: Tally | None = None,
    continues: Sequence[bool] = (),
) -> tuple[list[RequestRecord | Unparsed], bool]:
    """The requests, closed-loop; their records still to be parsed (:func:`completed`).
    Each finished request is counted in ``tally``. A request that ``continues`` the one
    before it (the next turn of a conversation) is sent by the same worker, after that
    one ended."""
    sent: list[RequestRecord | Unparsed | None] = [None] * len(bodies)
    next_index = 0
    deadline_hit = False
    add = tally.add if tally is not None else None

    def chain() -> list[int]:
        nonlocal next_index
        taken = [next_index]
        next_index += 1
        while next_index < len(continues) and continues[next_index]:
            taken.append(next_index)
            next_index += 1
        return taken

    async def worker(k: int) -> None:
        while next_index < len(bodies):
            for i in chain():
                await one(k, i)

    async def one(k: int, i: int) -> None:
        nonlocal deadline_hit
        remaining = deadline - clock()
        if remaining <= 0:
            deadline_hit = True
            sent[i] = RequestRecord(
                index=i, start=clock(), end=clock(), error="not run: level deadline exceeded"
            )
            return
        timeout = min(plan.request_timeout_s, remaining)
        result = await workers.send(k, bodies[i], index=i, plan=plan, timeout_s=timeout)
        sent[i] = result
        if add is not None:
            head = result.record if isinstance(result, Unparsed) else result
            add(head.error is not None or (head.status or 0) >= 400)

    await asyncio.gather(*(worker(k) for k in range(min(concurrency, len(bodies)))))
    return [r for r in sent if r is not None], deadline_hit


def completed(
    sent: list[RequestRecord | Unparsed],
    plan: RequestPlan,
    output_lens: Sequence[int | None],
    on_record: OnRecord | None = None,
) -> list[RequestRecord]:
    """Parsed and checked records (after the measured time: parsing is not I/O); request
    ``i`` asked for ``output_lens[i]`` tokens (None: the plan's)."""
    records = [plan.checked(r, output_lens[r.index]) for r in map(finished, sent)]
    if on_record is not None:
        for record in records:
            on_record(record.index, record)
    return records


@contextlib.asynccontextmanager
async def progress_shown(
    tally: Tally, on_progress: OnProgress | None, every_s: float = PROGRESS_EVERY_S
) -> AsyncIterator[None]:
    """Call ``on_progress(tally)`` as the block starts (a display's costly first draw
    comes before any request is sent) and then every ``every_s`` while it runs (nothing
    when ``on_progress`` is None)."""
    if on_progress is None:
        yield
        return
    on_progress(tally)

    async def tick() -> None:
        on_progress(tally)

    async with every(every_s, tick):
        yield


@contextlib.asynccontextmanager
async def every(every_s: float, step: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """Await ``step()`` every ``every_s`` while the block runs."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(every_s)
            await step()

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_level(
    workers: Workers,
    plan: RequestPlan,
    prompts: Sequence[Prompt],
    *,
    concurrency: int,
    warmup: int,
    level_timeout_s: float,
    clock: Callable[[], float] = time.perf_counter,
    on_record: OnRecord | None = None,
    on_measure_start: Callable[[], None] | None = None,
    on_progress: OnProgress | None = None,
) -> LevelRun:
    """Run ``warmup`` unmeasured requests, then the rest of ``prompts`` at ``concurrency``.
    ``on_measure_start`` runs between the two (e.g. to read server counters);
    ``on_progress`` gets the requests finished so far, every :data:`PROGRESS_EVERY_S`."""
    deadline = clock() + level_timeout_s
    bodies = [plan.body(p.text, p.output_len, p.history) for p in prompts]
    lens = [p.output_len for p in prompts]
    continues = [bool(p.history) for p in prompts]
    warm, measured = bodies[:warmup], bodies[warmup:]
    tally = Tally(concurrency)
    tally.begin("warmup", len(warm))
    async with progress_shown(tally, on_progress):
        warm_sent, _ = await run_requests(
            workers, plan, warm, concurrency, deadline, clock, tally, continues[:warmup]
        )
    warmup_records = completed(warm_sent, plan, lens[:warmup])
    if on_measure_start is not None:
        on_measure_start()
    await workers.open(min(concurrency, len(measured)))
    tally.begin("measure", len(measured))
    with collector_paused():
        async with progress_shown(tally, on_progress), LoopMonitor(clock=clock) as monitor:
            start = clock()
            sent, deadline_hit = await run_requests(
                workers, plan, measured, concurrency, deadline, clock, tally, continues[warmup:]
            )
    records = completed(sent, plan, lens[warmup:], on_record)
    end = max((r.end for r in records), default=start)
    return LevelRun(
        concurrency=concurrency,
        records=records,
        start=start,
        end=end,
        warmup_records=warmup_records,
        deadline_hit=deadline_hit,
        harness=monitor.stats(),
    )


@dataclass(frozen=True)
class RateShape:
    """How an open-loop level's requests arrive (:mod:`perfgate.workload.arrivals`), and the most
    allowed in flight (None: no cap; a request due while the cap is full waits in the
    client, and that wait counts in its latency)."""

    arrival: Arrival = "poisson"
    burstiness: float = 1.0
    max_in_flight: int | None = None
    seed: int = 0


OPEN_CONNECTIONS = 8  # connections opened before an uncapped open-loop level's clock


async def _run_scheduled(
    workers: Workers,
    plan: RequestPlan,
    bodies: Sequence[bytes],
    offsets: Sequence[float],
    cap: int | None,
    deadline: float,
    clock: Callable[[], float],
    tally: Tally | None = None,
) -> tuple[list[RequestRecord | Unparsed], bool, float]:
    """The requests, open-loop: request ``i`` is due ``offsets[i]`` after the start,
    whether or not earlier ones were answered; each takes a free connection (a new one
    when none is free) and, with a ``cap``, waits for one of ``cap`` slots. Returns the
    records still to be parsed, whether the deadline cut requests, and the start."""
    start = clock()
    sent: list[RequestRecord | Unparsed | None] = [None] * len(bodies)
    free: list[int] = list(range(min(cap or OPEN_CONNECTIONS, len(bodies))))[::-1]
    opened = len(free)
    slots = asyncio.Semaphore(cap) if cap else None
    deadline_hit = False
    add = tally.add if tally is not None else None

    async def one(i: int) -> None:
        nonlocal opened, deadline_hit
        due = start + offsets[i]
        if (wait := due - clock()) > 0:
            await asyncio.sleep(wait)
        async with slots if slots is not None else contextlib.nullcontext():
            remaining = deadline - clock()
            if remaining <= 0:
                deadline_hit = True
                now = clock()
                sent[i] = RequestRecord(
                    index=i,
                    start=now,
                    end=now,
                    scheduled=due,
                    error="not run: level deadline exceeded",
                )
                return
            if free:
                k = free.pop()
            else:
                k, opened = opened, opened + 1
            timeout = min(plan.request_timeout_s, remaining)
            result = await workers.send(k, bodies[i], index=i, plan=plan, timeout_s=timeout)
            free.append(k)
        head = result.record if isinstance(result, Unparsed) else result
        head.scheduled = due
        sent[i] = result
        if add is not None:
            add(head.error is not None or (head.status or 0) >= 400)

    await asyncio.gather(*(one(i) for i in range(len(bodies))))
    return [r for r in sent if r is not None], deadline_hit, start


async def run_rate_level(
    workers: Workers,
    plan: RequestPlan,
    prompts: Sequence[Prompt],
    *,
    rate: float,
    shape: RateShape,
    warmup: int,
    level_timeout_s: float,
    clock: Callable[[], float] = time.perf_counter,
    on_record: OnRecord | None = None,
    on_measure_start: Callable[[], None] | None = None,
    on_progress: OnProgress | None = None,
) -> LevelRun:
    """An open-loop level: ``warmup`` unmeasured requests one at a time, then the rest of
    ``prompts`` sent at ``rate`` requests a second on ``shape``'s schedule. Latency and
    TTFT count from each request's scheduled time; the wait before it left is its
    client delay (``RequestRecord.client_delay``)."""
    deadline = clock() + level_timeout_s
    bodies = [plan.body(p.text, p.output_len, p.history) for p in prompts]
    lens = [p.output_len for p in prompts]
    warm, measured = bodies[:warmup], bodies[warmup:]
    cap = shape.max_in_flight
    tally = Tally(cap or 0)
    tally.begin("warmup", len(warm))
    async with progress_shown(tally, on_progress):
        warm_sent, _ = await run_requests(workers, plan, warm, 1, deadline, clock, tally)
    warmup_records = completed(warm_sent, plan, lens[:warmup])
    if on_measure_start is not None:
        on_measure_start()
    await workers.open(min(cap or OPEN_CONNECTIONS, len(measured)))
    offsets = arrival_offsets(len(measured), rate, shape.arrival, shape.burstiness, seed=shape.seed)
    tally.begin("measure", len(measured))
    with collector_paused():
        async with progress_shown(tally, on_progress), LoopMonitor(clock=clock) as monitor:
            sent, deadline_hit, start = await _run_scheduled(
                workers, plan, measured, offsets, cap, deadline, clock, tally
            )
    records = completed(sent, plan, lens[warmup:], on_record)
    return LevelRun(
        concurrency=cap or 0,
        records=records,
        start=start,
        end=max((r.end for r in records), default=start),
        warmup_records=warmup_records,
        deadline_hit=deadline_hit,
        harness=monitor.stats(),
        rate=rate,
    )
