"""Running load: one level at concurrency C, and a sweep of levels in order.

A level is closed-loop: C workers each send their next request as soon as the
previous one ends, until N measured requests are done. Warmup requests run first
and are not measured.

Each worker has a connection of its own (:mod:`perfgate.workers`), kept across the
levels of a sweep. Before the clock starts, every body is encoded and each worker's
connection is open, so that neither lands in a request's TTFT. A :class:`LoopMonitor`
watches the harness's own lag and CPU during the measured requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats, LoopMonitor
from perfgate.workers import RequestPlan, WireWorkers, Workers
from perfgate.workload import Prompt

OnRecord = Callable[[int, RequestRecord], None]
Decision = Literal["next", "repeat", "stop"]
AfterLevel = Callable[[int, list["LevelRun"]], Decision]


@dataclass
class LevelRun:
    """Raw result of one level: its records and its wall-clock window."""

    concurrency: int
    records: list[RequestRecord]
    start: float
    end: float
    warmup_records: list[RequestRecord] = field(default_factory=list)
    deadline_hit: bool = False
    harness: HarnessStats | None = None

    @property
    def wall_s(self) -> float:
        """Seconds from the first measured request's start to the last one's end."""
        return self.end - self.start


@dataclass
class SweepRun:
    """Levels in the order they ran, and the levels the sweep did not reach."""

    levels: list[LevelRun]
    not_run: list[int]


RoundRunner = Callable[[Callable[[], None], int], None]


def plain_rounds(one_round: Callable[[], None], rounds: int) -> None:
    """Run rounds one after another (pytest-benchmark's ``pedantic`` is the other runner)."""
    for _ in range(rounds):
        one_round()


async def _run_requests(
    workers: Workers,
    plan: RequestPlan,
    bodies: Sequence[bytes],
    concurrency: int,
    deadline: float,
    clock: Callable[[], float],
    on_record: OnRecord | None,
) -> tuple[list[RequestRecord], bool]:
    records: list[RequestRecord | None] = [None] * len(bodies)
    next_index = 0
    deadline_hit = False

    async def worker(k: int) -> None:
        nonlocal next_index, deadline_hit
        while next_index < len(bodies):
            i = next_index
            next_index += 1
            remaining = deadline - clock()
            if remaining <= 0:
                deadline_hit = True
                records[i] = RequestRecord(
                    index=i, start=clock(), end=clock(), error="not run: level deadline exceeded"
                )
                continue
            timeout = min(plan.request_timeout_s, remaining)
            record = plan.checked(
                await workers.send(k, bodies[i], index=i, plan=plan, timeout_s=timeout)
            )
            records[i] = record
            if on_record is not None:
                on_record(i, record)

    await asyncio.gather(*(worker(k) for k in range(min(concurrency, len(bodies)))))
    return [r for r in records if r is not None], deadline_hit


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
) -> LevelRun:
    """Run ``warmup`` unmeasured requests, then the rest of ``prompts`` at ``concurrency``.
    ``on_measure_start`` runs between the two (e.g. to read server counters)."""
    deadline = clock() + level_timeout_s
    bodies = [plan.body(p.text) for p in prompts]
    warm, measured = bodies[:warmup], bodies[warmup:]
    warmup_records, _ = await _run_requests(workers, plan, warm, concurrency, deadline, clock, None)
    if on_measure_start is not None:
        on_measure_start()
    await workers.open(min(concurrency, len(measured)))
    async with LoopMonitor(clock=clock) as monitor:
        start = clock()
        records, deadline_hit = await _run_requests(
            workers, plan, measured, concurrency, deadline, clock, on_record
        )
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


async def run_sweep(
    base_url: str,
    plan: RequestPlan,
    levels: Sequence[int],
    prompts_for: Callable[[int, int], Sequence[Prompt]],
    *,
    warmup: int,
    level_timeout_s: float,
    after_level: AfterLevel | None = None,
    on_record: OnRecord | None = None,
    on_level: Callable[[LevelRun, int], None] | None = None,
    on_measure_start: Callable[[], None] | None = None,
) -> SweepRun:
    """Run levels in order, each worker on its own connection for the whole sweep.

    After each run of a level, ``after_level(concurrency, runs_so_far)`` says what next:
    ``"next"`` level, ``"repeat"`` this level, or ``"stop"`` the sweep (early abort).
    ``prompts_for(concurrency, repeat)`` gives each run's prompts, warmup first.
    """
    done: list[LevelRun] = []
    async with WireWorkers(base_url) as workers:
        for position, concurrency in enumerate(levels):
            runs: list[LevelRun] = []
            while True:
                prompts = prompts_for(concurrency, len(runs))
                level = await run_level(
                    workers,
                    plan,
                    prompts,
                    concurrency=concurrency,
                    warmup=warmup,
                    level_timeout_s=level_timeout_s,
                    on_record=on_record,
                    on_measure_start=on_measure_start,
                )
                runs.append(level)
                done.append(level)
                if on_level is not None:
                    on_level(level, len(runs) - 1)
                decision = after_level(concurrency, runs) if after_level else "next"
                if decision == "stop":
                    return SweepRun(levels=done, not_run=list(levels[position + 1 :]))
                if decision == "next":
                    break
    return SweepRun(levels=done, not_run=[])
