"""Running load: one level at concurrency C, and a sweep of levels in order.

A level is closed-loop: C workers each send their next request as soon as the
previous one ends, until N measured requests are done. Warmup requests run first
and are not measured.

Each worker has a connection of its own (:class:`WireWorkers`: the lean client of
:mod:`perfgate.client.wire`), kept across the levels of a sweep. One shared httpx pool
would not do: it hands one idle connection to several new requests at once and makes
the others wait, so 64 requests launched together had 14 in flight at the server.
Before the clock starts, every body is encoded and each worker's connection is open, so
that neither lands in a request's TTFT. A :class:`LoopMonitor` watches the harness's
own lag and CPU during the measured requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from perfgate.client import Api, RequestRecord, encode_body, request_body, stream_request
from perfgate.client.monitor import HarnessStats, LoopMonitor
from perfgate.client.stream import send_streamed
from perfgate.client.wire import Endpoint, WireConnection
from perfgate.workload import Prompt

OnRecord = Callable[[int, RequestRecord], None]
Decision = Literal["next", "repeat", "stop"]
AfterLevel = Callable[[int, list["LevelRun"]], Decision]


@dataclass(frozen=True)
class RequestPlan:
    """What every request of a run sends (besides its prompt)."""

    api: Api
    model: str
    output_len: int
    request_timeout_s: float
    extras: dict[str, Any] = field(default_factory=dict)
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")

    def body(self, prompt: str) -> bytes:
        """The encoded body of one request."""
        return encode_body(
            request_body(self.api, self.model, prompt, self.output_len, **self.extras)
        )

    def output_problem(self, record: RequestRecord) -> str | None:
        """Why a completed request's output does not count (None: it does).

        A finish reason other than stop or length (e.g. ``abort``) fails; so does an
        output shorter than asked when ``ignore_eos`` forced the length.
        """
        if not record.ok:
            return None
        if record.finish_reason not in ("stop", "length"):
            return f"finish_reason {record.finish_reason!r} (expected stop or length)"
        if self.extras.get("ignore_eos") and record.output_tokens < self.output_len:
            return (
                f"short output: {record.output_tokens} of {self.output_len} tokens although "
                "ignore_eos was sent"
            )
        return None

    def checked(self, record: RequestRecord) -> RequestRecord:
        """The record, failed where its output does not count."""
        if (problem := self.output_problem(record)) is not None:
            record.error = problem
        return record


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


class Workers(Protocol):
    """Where a level's workers send their requests: worker ``k`` always on its own
    connection."""

    async def open(self, count: int) -> None:
        """Have the first ``count`` workers' connections open (before the clock)."""

    async def send(
        self, worker: int, body: bytes, *, index: int, plan: RequestPlan, timeout_s: float
    ) -> RequestRecord:
        """One streamed request on worker ``worker``'s connection."""

    async def aclose(self) -> None:
        """Close every connection."""


class WireWorkers:
    """The measurement's workers: a lean keep-alive connection each
    (:mod:`perfgate.client.wire`), opened on demand and kept across the levels."""

    def __init__(self, base_url: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.endpoint = Endpoint(base_url)
        self.clock = clock
        self._connections: dict[int, WireConnection] = {}

    async def open(self, count: int) -> None:
        async def one(worker: int) -> None:
            conn = self._connections.get(worker)
            if conn is None or conn.closed:
                with contextlib.suppress(OSError, TimeoutError):  # shows in the request
                    self._connections[worker] = await self.endpoint.connect(self.clock)

        await asyncio.gather(*(one(k) for k in range(count)))

    async def send(
        self, worker: int, body: bytes, *, index: int, plan: RequestPlan, timeout_s: float
    ) -> RequestRecord:
        record, kept = await send_streamed(
            self.endpoint,
            self._connections.pop(worker, None),
            body,
            index=index,
            api=plan.api,
            timeout_s=timeout_s,
            reasoning_fields=plan.reasoning_fields,
            clock=self.clock,
        )
        if kept is not None:
            self._connections[worker] = kept
        return record

    async def aclose(self) -> None:
        for conn in self._connections.values():
            conn.abort()
        self._connections.clear()

    async def __aenter__(self) -> WireWorkers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class HttpxWorkers:
    """Workers on httpx clients, one client per worker from ``make`` (tests pass one
    shared client on a mock transport). ``open`` sends a cheap GET per worker."""

    def __init__(
        self, make: Callable[[], httpx.AsyncClient], connect_path: str = "/v1/models"
    ) -> None:
        self._make = make
        self._clients: list[httpx.AsyncClient] = []
        self.connect_path = connect_path

    def client(self, worker: int) -> httpx.AsyncClient:
        """Worker ``worker``'s client."""
        while len(self._clients) <= worker:
            self._clients.append(self._make())
        return self._clients[worker]

    async def open(self, count: int) -> None:
        async def one(worker: int) -> None:
            try:
                response = await self.client(worker).get(self.connect_path)
                await response.aclose()
            except httpx.HTTPError:
                pass

        await asyncio.gather(*(one(k) for k in range(count)))

    async def send(
        self, worker: int, body: bytes, *, index: int, plan: RequestPlan, timeout_s: float
    ) -> RequestRecord:
        return await stream_request(
            self.client(worker),
            body,
            index=index,
            api=plan.api,
            timeout_s=timeout_s,
            reasoning_fields=plan.reasoning_fields,
        )

    async def aclose(self) -> None:
        for client in {id(c): c for c in self._clients}.values():
            await client.aclose()
        self._clients.clear()

    async def __aenter__(self) -> HttpxWorkers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class SequentialClient:
    """Blocking requests one after another on one kept connection (the single-request
    measurement, where each request is a pytest-benchmark round). Close it when done."""

    def __init__(self, base_url: str, plan: RequestPlan) -> None:
        self.plan = plan
        self._loop = asyncio.new_event_loop()
        self._workers = WireWorkers(base_url)
        self.sent = 0

    def send(self, prompt: str) -> RequestRecord:
        """One streamed request, its output checked (:meth:`RequestPlan.checked`)."""
        plan = self.plan
        record = self._loop.run_until_complete(
            self._workers.send(
                0, plan.body(prompt), index=self.sent, plan=plan, timeout_s=plan.request_timeout_s
            )
        )
        self.sent += 1
        return plan.checked(record)

    def close(self) -> None:
        """Close the connection and the event loop."""
        self._loop.run_until_complete(self._workers.aclose())
        self._loop.close()


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
