"""Running load: one level at concurrency C, and a sweep of levels in order.

A level is closed-loop: C workers each send their next request as soon as the
previous one ends, until N measured requests are done. Warmup requests run first
and are not measured.

Each worker has a connection of its own (:class:`WorkerClients`), kept across the
levels of a sweep. One shared httpx pool would not do: it hands one idle connection to
several new requests at once and makes the others wait, so 64 requests launched
together had 14 in flight at the server. Before the clock starts, every body is encoded
and each worker's connection is open, so that neither lands in a request's TTFT. A
:class:`LoopMonitor` watches the harness's own lag and CPU during the measured requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from perfgate.client import Api, RequestRecord, encode_body, request_body, stream_request
from perfgate.client.monitor import HarnessStats, LoopMonitor
from perfgate.client.transport import pooled_client
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
    connect_path: str = "/v1/models"  # a cheap GET that opens a pooled connection

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


class SequentialClient:
    """Blocking requests one after another on one pooled connection (the single-request
    measurement, where each request is a pytest-benchmark round). Close it when done."""

    def __init__(self, base_url: str, plan: RequestPlan) -> None:
        self.plan = plan
        self._loop = asyncio.new_event_loop()
        self._client = pooled_client(base_url, 1, plan.request_timeout_s)
        self.sent = 0

    def send(self, prompt: str) -> RequestRecord:
        """One streamed request, its output checked (:meth:`RequestPlan.checked`)."""
        plan = self.plan
        record = self._loop.run_until_complete(
            stream_request(
                self._client,
                plan.body(prompt),
                index=self.sent,
                api=plan.api,
                timeout_s=plan.request_timeout_s,
                reasoning_fields=plan.reasoning_fields,
            )
        )
        self.sent += 1
        return plan.checked(record)

    def close(self) -> None:
        """Close the connection, the streams' generators and the event loop."""
        self._loop.run_until_complete(self._client.aclose())
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()


class WorkerClients:
    """One client, with one connection, per worker, made on first use and kept until
    closed. ``make`` builds a client (tests pass one shared mock client)."""

    def __init__(self, make: Callable[[], httpx.AsyncClient]) -> None:
        self._make = make
        self._clients: list[httpx.AsyncClient] = []

    def client(self, worker: int) -> httpx.AsyncClient:
        """Worker ``worker``'s client."""
        while len(self._clients) <= worker:
            self._clients.append(self._make())
        return self._clients[worker]

    async def open(self, count: int, path: str) -> None:
        """Have the first ``count`` workers' connections open: one cheap GET each, all at
        once (the answer does not matter; a refused connection shows in the requests that
        follow)."""

        async def one(worker: int) -> None:
            try:
                response = await self.client(worker).get(path)
                await response.aclose()
            except httpx.HTTPError:
                pass

        await asyncio.gather(*(one(k) for k in range(count)))

    async def aclose(self) -> None:
        """Close every client (each once)."""
        for client in {id(c): c for c in self._clients}.values():
            await client.aclose()
        self._clients.clear()

    async def __aenter__(self) -> WorkerClients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _run_requests(
    clients: WorkerClients,
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
        client = clients.client(k)
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
            record = plan.checked(
                await stream_request(
                    client,
                    bodies[i],
                    index=i,
                    api=plan.api,
                    timeout_s=min(plan.request_timeout_s, remaining),
                    reasoning_fields=plan.reasoning_fields,
                    clock=clock,
                )
            )
            records[i] = record
            if on_record is not None:
                on_record(i, record)

    await asyncio.gather(*(worker(k) for k in range(min(concurrency, len(bodies)))))
    return [r for r in records if r is not None], deadline_hit


async def run_level(
    clients: WorkerClients,
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
    warmup_records, _ = await _run_requests(clients, plan, warm, concurrency, deadline, clock, None)
    if on_measure_start is not None:
        on_measure_start()
    await clients.open(min(concurrency, len(measured)), plan.connect_path)
    async with LoopMonitor(clock=clock) as monitor:
        start = clock()
        records, deadline_hit = await _run_requests(
            clients, plan, measured, concurrency, deadline, clock, on_record
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
    timeout = plan.request_timeout_s
    async with WorkerClients(lambda: pooled_client(base_url, 1, timeout)) as clients:
        for position, concurrency in enumerate(levels):
            runs: list[LevelRun] = []
            while True:
                prompts = prompts_for(concurrency, len(runs))
                level = await run_level(
                    clients,
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
