"""Client processes for a level one event loop cannot keep up with: each shard runs its
share of the level's workers with :mod:`perfgate.load.level`'s code (:class:`ShardRunner`),
and :class:`ShardPool` merges their records on one clock (``time.perf_counter``, the
host's monotonic clock, shared by its processes)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
from collections.abc import AsyncIterator, Callable, MutableSequence, Sequence
from multiprocessing.connection import Connection
from typing import Any, Protocol

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats, LoopMonitor
from perfgate.load.level import (
    PROGRESS_EVERY_S,
    LevelRun,
    OnProgress,
    OnRecord,
    Tally,
    collector_paused,
    completed,
    every,
    progress_shown,
    run_requests,
)
from perfgate.load.workers import RequestPlan, WireWorkers
from perfgate.workload.prompts import Prompt


class PooledTally(Tally):
    """The main process's view of a level spread over client processes: the sum of
    their tallies."""

    def __init__(self, concurrency: int, shards: Sequence[MutableSequence[int]]) -> None:
        super().__init__(concurrency)
        self._shards = shards

    @property
    def done(self) -> int:
        return sum(counts[0] for counts in self._shards)

    @property
    def failed(self) -> int:
        return sum(counts[1] for counts in self._shards)


def _share(items: Sequence[Any], shard: int, shards: int) -> list[Any]:
    return list(items[shard::shards])


# A level's share for one shard: (plan, warmup bodies, measured bodies, each with its
# output length; concurrency; seconds left before the level's deadline)
ShardJob = tuple[
    RequestPlan, list[tuple[bytes, int | None]], list[tuple[bytes, int | None]], int, float
]


# What a shard sends back: warmup records, measured records, its harness stats, deadline hit
ShardResult = tuple[list[RequestRecord], list[RequestRecord], HarnessStats, bool]


class ShardRunner:
    """One shard's side of a level, on its own event loop and connections: warm up, open
    the connections, then run the measured share when told, counting into ``counts``."""

    def __init__(self, base_url: str, counts: MutableSequence[int]) -> None:
        self.counts = counts
        self._workers = WireWorkers(base_url)
        self._job: tuple[RequestPlan, list[bytes], list[int | None], float, Tally] | None = None

    async def __aenter__(self) -> ShardRunner:
        await self._workers.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._workers.__aexit__(*exc)

    async def warm(self, job: ShardJob) -> list[RequestRecord]:
        """Run the warmup share; the measured share waits for :meth:`go`."""
        plan, warm_share, measured_share, concurrency, timeout_s = job
        deadline = time.perf_counter() + timeout_s
        tally = Tally(concurrency, self.counts)
        tally.begin("warmup", len(warm_share))
        warm_sent, _ = await run_requests(
            self._workers,
            plan,
            [b for b, _ in warm_share],
            concurrency,
            deadline,
            time.perf_counter,
            tally,
        )
        measured = [b for b, _ in measured_share]
        self._job = (plan, measured, [n for _, n in measured_share], deadline, tally)
        return completed(warm_sent, plan, [n for _, n in warm_share])

    async def open(self) -> None:
        """Open the measured share's connections (before the clock)."""
        assert self._job is not None
        _, measured, _, _, tally = self._job
        await self._workers.open(min(tally.concurrency, len(measured)))
        tally.begin("measure", len(measured))

    async def go(self) -> tuple[list[RequestRecord], HarnessStats, bool]:
        """Run the measured share: its records, the harness's stats, deadline hit."""
        assert self._job is not None
        plan, measured, lens, deadline, tally = self._job
        self._job = None
        with collector_paused():
            async with LoopMonitor(clock=time.perf_counter) as monitor:
                sent, hit = await run_requests(
                    self._workers,
                    plan,
                    measured,
                    tally.concurrency,
                    deadline,
                    time.perf_counter,
                    tally,
                )
        return completed(sent, plan, lens), monitor.stats(), hit


class ShardLink(Protocol):
    """The main process's handle on one shard (a client process here, or a Ray actor)."""

    counts: MutableSequence[int]  # the shard's tally (done, failed), as fresh as it gets
    clock_error_s: float  # how far its timestamps may be off ours once converted

    async def warm(self, job: ShardJob) -> list[RequestRecord]: ...
    async def open(self) -> None: ...
    async def go(self) -> tuple[list[RequestRecord], HarnessStats, bool]: ...
    async def sync_clock(self) -> None: ...
    async def refresh_counts(self) -> None: ...
    def to_our_clock(self, t: float) -> float: ...
    def close(self) -> None: ...


class ProcessLink:
    """A client process on this host: the same monotonic clock, its tally in shared
    memory, messages over a pipe."""

    clock_error_s = 0.0

    def __init__(self, base_url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self.counts = context.RawArray("q", 2)
        self._process = context.Process(
            target=_shard_main, args=(child, base_url, self.counts), daemon=True
        )
        self._process.start()
        child.close()

    async def _say(self, message: object) -> Any:
        """Send ``message`` and return the answer (a shard that died is an error)."""
        self._pipe.send(message)
        try:
            answer = await asyncio.to_thread(self._pipe.recv)
        except EOFError:
            raise RuntimeError(
                f"client process {self._process.pid} died (exit code {self._process.exitcode})"
            ) from None
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def warm(self, job: ShardJob) -> list[RequestRecord]:
        return await self._say(job)  # type: ignore[no-any-return]

    async def open(self) -> None:
        await self._say("open")

    async def go(self) -> tuple[list[RequestRecord], HarnessStats, bool]:
        return await self._say("go")  # type: ignore[no-any-return]

    async def sync_clock(self) -> None:
        """One host, one monotonic clock."""

    async def refresh_counts(self) -> None:
        """Shared memory is always fresh."""

    def to_our_clock(self, t: float) -> float:
        return t

    def close(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self._pipe.send(None)
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()  # by pid
            self._process.join()
        self._pipe.close()


def _on_our_clock(record: RequestRecord, link: ShardLink) -> RequestRecord:
    """A shard's record with its timestamps converted to this process's clock."""
    convert = link.to_our_clock
    record.start, record.end = convert(record.start), convert(record.end)
    record.sent = None if record.sent is None else convert(record.sent)
    record.scheduled = None if record.scheduled is None else convert(record.scheduled)
    record.token_times = [convert(t) for t in record.token_times]
    return record


class ShardPool:
    """Shards that each run a share of a level's workers on their own event loop and
    connections (client processes on this host; :mod:`perfgate.load.rayshards` runs them as
    Ray actors); the level's records come back merged, indices and all, on this
    process's clock."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._links: list[ShardLink] = []

    def max_shards(self) -> int:
        """How many shards this pool may run: the host's cores less one."""
        return max(1, (os.cpu_count() or 1) - 1)

    def new_link(self) -> ShardLink:
        """Start one more shard."""
        return ProcessLink(self.base_url)

    def ensure(self, count: int) -> None:
        """Have at least ``count`` shards running."""
        while len(self._links) < count:
            self._links.append(self.new_link())

    async def run_level(
        self,
        plan: RequestPlan,
        prompts: Sequence[Prompt],
        *,
        shards: int,
        concurrency: int,
        warmup: int,
        level_timeout_s: float,
        on_record: OnRecord | None = None,
        on_measure_start: Callable[[], None] | None = None,
        on_progress: OnProgress | None = None,
    ) -> LevelRun:
        """:func:`run_level` with its workers spread over ``shards`` shards (each gets
        every n-th request); the same barriers: all warmups end, then counters are read,
        then all connections open, then the clock starts."""
        shards = max(1, min(shards, concurrency))
        self.ensure(shards)
        used = self._links[:shards]
        await asyncio.gather(*(link.sync_clock() for link in used))
        tally = PooledTally(concurrency, [link.counts for link in used])
        bodies = [(plan.body(p.text, p.output_len, p.history), p.output_len) for p in prompts]
        warm, measured = bodies[:warmup], bodies[warmup:]
        deadline = time.perf_counter() + level_timeout_s

        def job(k: int) -> ShardJob:
            share = concurrency // shards + (k < concurrency % shards)
            left = deadline - time.perf_counter()
            return (plan, _share(warm, k, shards), _share(measured, k, shards), share, left)

        tally.begin("warmup", len(warm))
        async with progress_shown(tally, on_progress), _counts_refreshed(used):
            warm_results = await asyncio.gather(*(link.warm(job(k)) for k, link in enumerate(used)))
        if on_measure_start is not None:
            on_measure_start()
        await asyncio.gather(*(link.open() for link in used))
        tally.begin("measure", len(measured))
        start = time.perf_counter()
        async with progress_shown(tally, on_progress), _counts_refreshed(used):
            results = await asyncio.gather(*(link.go() for link in used))
        records: list[RequestRecord] = []
        warmup_records: list[RequestRecord] = []
        for k, (link, warm_k, (records_k, _, _)) in enumerate(
            zip(used, warm_results, results, strict=True)
        ):
            for record in records_k:
                record.index = record.index * shards + k
                records.append(_on_our_clock(record, link))
            warmup_records += [_on_our_clock(r, link) for r in warm_k]
        records.sort(key=lambda r: r.index)
        if on_record is not None:
            for record in records:
                on_record(record.index, record)
        harness = HarnessStats.merged([h for _, h, _ in results])
        harness.clock_error_s = max(link.clock_error_s for link in used)
        return LevelRun(
            concurrency=concurrency,
            records=records,
            start=start,
            end=max((r.end for r in records), default=start),
            warmup_records=warmup_records,
            deadline_hit=any(hit for *_, hit in results),
            harness=harness,
        )

    def close(self) -> None:
        """Stop every shard."""
        for link in self._links:
            link.close()
        self._links.clear()


@contextlib.asynccontextmanager
async def _counts_refreshed(
    links: Sequence[ShardLink], every_s: float = PROGRESS_EVERY_S / 2
) -> AsyncIterator[None]:
    """Keep the shards' tallies fresh while a phase runs (a Ray actor's come by asking)."""

    async def refresh() -> None:
        await asyncio.gather(*(link.refresh_counts() for link in links))

    async with every(every_s, refresh):
        yield


def _shard_main(pipe: Connection, base_url: str, counts: MutableSequence[int]) -> None:
    """A shard process: run level shares as the main process sends them, counting
    finished requests in ``counts`` (shared with the main process)."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_shard_loop(pipe, base_url, counts))


async def _shard_loop(pipe: Connection, base_url: str, counts: MutableSequence[int]) -> None:
    async with ShardRunner(base_url, counts) as runner:
        while (job := await asyncio.to_thread(pipe.recv)) is not None:
            try:
                pipe.send(await runner.warm(job))
                await asyncio.to_thread(pipe.recv)  # "open"
                await runner.open()
                pipe.send("open")
                await asyncio.to_thread(pipe.recv)  # "go"
                pipe.send(await runner.go())
            except Exception as exc:  # the main process raises it
                pipe.send(exc)
