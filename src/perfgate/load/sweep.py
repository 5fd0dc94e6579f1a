"""Level runs one after another on connections kept across them (:class:`LevelRunner`),
over one client process or several; a sweep of levels in order (:func:`run_sweep`).

When one event loop cannot keep up (measured: its lag above the bound, or its CPU above
:data:`BUSY_SHARE` of a core, :func:`client_processes`), a sweep's next levels spread
their workers over client processes (:class:`~perfgate.load.shards.ShardPool`), whose
records are merged on one clock: ``time.perf_counter`` is the host's monotonic clock,
shared by its processes.
Each shard runs its share of a level with :mod:`perfgate.load.level`'s code
(:class:`~perfgate.load.shards.ShardRunner`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats
from perfgate.load.level import (
    Level,
    LevelRun,
    OnProgress,
    OnRecord,
    RateShape,
    run_level,
    run_rate_level,
)
from perfgate.load.shards import ShardPool
from perfgate.load.workers import RequestPlan, WireWorkers, Workers, send_one
from perfgate.workload.prompts import Prompt

Decision = Literal["next", "repeat", "stop"]  # after a level's run: what the sweep does


AfterLevel = Callable[[Level, list[LevelRun]], Decision]


@dataclass
class SweepRun:
    """Levels in the order they ran, and the levels the sweep did not reach."""

    levels: list[LevelRun]
    not_run: list[Level]


BUSY_SHARE = 0.6  # a client process above this share of a core is near falling behind


def client_processes(current: int, harness: HarnessStats | None, limit: int) -> int:
    """Client processes for the sweep's next level run: twice as many (up to ``limit``)
    when a process of this one could not keep up (loop lag above its bound, or CPU above
    :data:`BUSY_SHARE` of a core a process), else as many."""
    if harness is None or current >= limit:
        return current
    if harness.over_bound or harness.cpu_share / harness.processes > BUSY_SHARE:
        return min(limit, current * 2)
    return current


class LevelRunner:
    """Runs one level run at a time, each worker on its own connection kept across the
    runs: a float level is a request rate, run open-loop on ``rate_shape``'s schedule
    (:func:`run_rate_level`, in this process); a concurrency runs closed-loop, in this
    process or, once one could not keep up, over client processes (``processes``:
    their number, or ``"auto"``: one, and more once one could not keep up,
    :func:`client_processes`; at most the pool's :meth:`ShardPool.max_shards`).
    ``pool_for(base_url)``: the shards' pool (client processes on this host, or
    :class:`perfgate.load.rayshards.RayShardPool`). ``workers_for(base_url)``: this
    process's workers (lean wire connections; tests: httpx on an injected transport).
    Close it with :meth:`aclose`."""

    def __init__(
        self,
        base_url: str,
        plan: RequestPlan,
        *,
        warmup: int,
        level_timeout_s: float,
        on_record: OnRecord | None = None,
        on_progress: OnProgress | None = None,
        processes: int | Literal["auto"] = "auto",
        rate_shape: RateShape | None = None,
        pool_for: Callable[[str], ShardPool] = ShardPool,
        workers_for: Callable[[str], Workers] = WireWorkers,
    ) -> None:
        self.plan = plan
        self.warmup = warmup
        self.level_timeout_s = level_timeout_s
        self.on_record = on_record
        self.on_progress = on_progress
        self.processes = processes
        self.rate_shape = rate_shape or RateShape()
        self.pool = pool_for(base_url)
        self.limit = self.pool.max_shards() if processes == "auto" else processes
        self.current = 1 if processes == "auto" else processes  # client processes now
        self.workers = workers_for(base_url)
        self.sent = 0  # sequential requests sent

    async def run(
        self,
        level: Level,
        prompts: Sequence[Prompt],
        *,
        on_measure_start: Callable[[], None] | None = None,
        warmup: int | None = None,
    ) -> LevelRun:
        """One run of ``level`` over ``prompts`` (``warmup`` of them first, unmeasured;
        None: the runner's); ``on_measure_start`` runs as the measured requests start."""
        warmup = self.warmup if warmup is None else warmup
        if isinstance(level, float):
            run = await run_rate_level(
                self.workers,
                self.plan,
                prompts,
                rate=level,
                shape=self.rate_shape,
                warmup=warmup,
                level_timeout_s=self.level_timeout_s,
                on_record=self.on_record,
                on_measure_start=on_measure_start,
                on_progress=self.on_progress,
            )
        elif self.current > 1 and level > 1 and not any(p.history for p in prompts):
            run = await self.pool.run_level(
                self.plan,
                prompts,
                shards=self.current,
                concurrency=level,
                warmup=warmup,
                level_timeout_s=self.level_timeout_s,
                on_record=self.on_record,
                on_measure_start=on_measure_start,
                on_progress=self.on_progress,
            )
        else:
            run = await run_level(
                self.workers,
                self.plan,
                prompts,
                concurrency=level,
                warmup=warmup,
                level_timeout_s=self.level_timeout_s,
                on_record=self.on_record,
                on_measure_start=on_measure_start,
                on_progress=self.on_progress,
            )
        if self.processes == "auto":
            self.current = client_processes(self.current, run.harness, self.limit)
        return run

    async def send(self, prompt: Prompt) -> RequestRecord:
        """One request on worker 0's connection (:func:`send_one`): sequential requests,
        one a round."""
        self.sent += 1
        return await send_one(
            self.workers, self.plan, self.sent - 1, prompt.text, prompt.output_len, prompt.history
        )

    async def aclose(self) -> None:
        """Close the connections and the client processes."""
        try:
            await self.workers.aclose()
        finally:
            self.pool.close()


async def run_sweep(
    base_url: str,
    plan: RequestPlan,
    levels: Sequence[Level],
    prompts_for: Callable[[Level, int], Sequence[Prompt]],
    *,
    warmup: int,
    level_timeout_s: float,
    after_level: AfterLevel | None = None,
    on_record: OnRecord | None = None,
    on_level: Callable[[LevelRun, int], None] | None = None,
    on_measure_start: Callable[[], None] | None = None,
    on_progress: OnProgress | None = None,
    processes: int | Literal["auto"] = "auto",
    rate_shape: RateShape | None = None,
    pool_for: Callable[[str], ShardPool] = ShardPool,
    workers_for: Callable[[str], Workers] = WireWorkers,
) -> SweepRun:
    """Run levels in order on one :class:`LevelRunner` (its arguments as there).

    After each run of a level, ``after_level(concurrency, runs_so_far)`` says what next:
    ``"next"`` level, ``"repeat"`` this level, or ``"stop"`` the sweep (early abort).
    ``prompts_for(concurrency, repeat)`` gives each run's prompts, warmup first.
    """
    done: list[LevelRun] = []
    runner = LevelRunner(
        base_url,
        plan,
        warmup=warmup,
        level_timeout_s=level_timeout_s,
        on_record=on_record,
        on_progress=on_progress,
        processes=processes,
        rate_shape=rate_shape,
        pool_for=pool_for,
        workers_for=workers_for,
    )
    try:
        for position, concurrency in enumerate(levels):
            runs: list[LevelRun] = []
            while True:
                prompts = prompts_for(concurrency, len(runs))
                level = await runner.run(concurrency, prompts, on_measure_start=on_measure_start)
                runs.append(level)
                done.append(level)
                if on_level is not None:
                    on_level(level, len(runs) - 1)
                decision = after_level(concurrency, runs) if after_level else "next"
                if decision == "stop":
                    return SweepRun(levels=done, not_run=list(levels[position + 1 :]))
                if decision == "next":
                    break
    finally:
        await runner.aclose()
    return SweepRun(levels=done, not_run=[])
