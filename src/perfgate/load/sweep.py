"""A sweep of levels in order, over one client process or several.

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
from perfgate.load.workers import RequestPlan, WireWorkers, Workers
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
    """Run levels in order, each worker on its own connection for the whole sweep. A
    float level is a request rate, run open-loop on ``rate_shape``'s schedule
    (:func:`run_rate_level`, in this process).

    After each run of a level, ``after_level(concurrency, runs_so_far)`` says what next:
    ``"next"`` level, ``"repeat"`` this level, or ``"stop"`` the sweep (early abort).
    ``prompts_for(concurrency, repeat)`` gives each run's prompts, warmup first.
    ``processes``: client processes, or ``"auto"``: one, and more once one could not
    keep up (:func:`client_processes`; at most the pool's :meth:`ShardPool.max_shards`).
    ``pool_for(base_url)``: the shards' pool (client processes on this host, or
    :class:`perfgate.load.rayshards.RayShardPool`). ``workers_for(base_url)``: this
    process's workers (lean wire connections; tests: httpx on an injected transport).
    """
    done: list[LevelRun] = []
    pool = pool_for(base_url)
    limit = pool.max_shards() if processes == "auto" else processes
    current = 1 if processes == "auto" else processes
    try:
        workers = workers_for(base_url)
        try:
            for position, concurrency in enumerate(levels):
                runs: list[LevelRun] = []
                while True:
                    prompts = prompts_for(concurrency, len(runs))
                    if isinstance(concurrency, float):
                        level = await run_rate_level(
                            workers,
                            plan,
                            prompts,
                            rate=concurrency,
                            shape=rate_shape or RateShape(),
                            warmup=warmup,
                            level_timeout_s=level_timeout_s,
                            on_record=on_record,
                            on_measure_start=on_measure_start,
                            on_progress=on_progress,
                        )
                    elif current > 1 and concurrency > 1 and not any(p.history for p in prompts):
                        level = await pool.run_level(
                            plan,
                            prompts,
                            shards=current,
                            concurrency=concurrency,
                            warmup=warmup,
                            level_timeout_s=level_timeout_s,
                            on_record=on_record,
                            on_measure_start=on_measure_start,
                            on_progress=on_progress,
                        )
                    else:
                        level = await run_level(
                            workers,
                            plan,
                            prompts,
                            concurrency=concurrency,
                            warmup=warmup,
                            level_timeout_s=level_timeout_s,
                            on_record=on_record,
                            on_measure_start=on_measure_start,
                            on_progress=on_progress,
                        )
                    runs.append(level)
                    done.append(level)
                    if on_level is not None:
                        on_level(level, len(runs) - 1)
                    if processes == "auto":
                        current = client_processes(current, level.harness, limit)
                    decision = after_level(concurrency, runs) if after_level else "next"
                    if decision == "stop":
                        return SweepRun(levels=done, not_run=list(levels[position + 1 :]))
                    if decision == "next":
                        break
        finally:
            await workers.aclose()
    finally:
        pool.close()
    return SweepRun(levels=done, not_run=[])
