"""Where a measurement's requests go: what every request sends (:class:`RequestPlan`)
and the workers that send them, each on a connection of its own.

:class:`WireWorkers` is the measurement's: the lean client of
:mod:`perfgate.client.wire`, a keep-alive connection per worker, opened before the clock
and kept across the levels of a sweep. One shared httpx pool would not do: it hands one
idle connection to several new requests at once and makes the others wait, so 64
requests launched together had 14 in flight at the server. :class:`HttpxWorkers` runs
the same on httpx clients (mock transports in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from perfgate.client import Api, RequestRecord, encode_body, request_body, stream_request
from perfgate.client.answers import (
    Tool,
    asked_schema,
    meets_schema,
    offered_tools,
    valid_tool_answer,
)
from perfgate.client.stream import Unparsed, send_streamed
from perfgate.client.wire import Endpoint, WireConnection, header_lines


@dataclass(frozen=True)
class RequestPlan:
    """What every request of a run sends (besides its prompt)."""

    api: Api
    model: str
    output_len: int
    request_timeout_s: float
    extras: dict[str, Any] = field(default_factory=dict)
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    # the server's API key and extra headers (:meth:`perfgate.profile.Profile.request_headers`)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    head_lines: bytes = field(init=False, repr=False, compare=False)
    # what every answer is judged against, from ``extras``: a response_format's schema,
    # the offered functions (None: not asked)
    schema: dict[str, Any] | None = field(init=False, repr=False, compare=False)
    tools: list[Tool] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_lines", header_lines(self.headers))
        object.__setattr__(self, "schema", asked_schema(self.extras))
        object.__setattr__(self, "tools", offered_tools(self.extras))

    def body(
        self,
        prompt: str,
        output_len: int | None = None,
        history: Sequence[tuple[str, str]] = (),
    ) -> bytes:
        """The encoded body of one request (``output_len``: this request's own, else the
        plan's; ``history``: the conversation's earlier turns, resent)."""
        return encode_body(
            request_body(
                self.api,
                self.model,
                prompt,
                output_len or self.output_len,
                history,
                **self.extras,
            )
        )

    def output_problem(self, record: RequestRecord, output_len: int | None = None) -> str | None:
        """Why a completed request's output does not count (None: it does).

        A finish reason other than stop or length (e.g. ``abort``) fails; so does an
        output shorter than asked (``output_len``, else the plan's) when ``ignore_eos``
        forced the length.
        """
        if not record.ok:
            return None
        ends = ("stop", "length", "tool_calls") if self.tools else ("stop", "length")
        if record.finish_reason not in ends:
            return f"finish_reason {record.finish_reason!r} (expected {' or '.join(ends)})"
        asked = output_len or self.output_len
        if self.extras.get("ignore_eos") and record.output_tokens < asked:
            return (
                f"short output: {record.output_tokens} of {asked} tokens although "
                "ignore_eos was sent"
            )
        return None

    def checked(self, record: RequestRecord, output_len: int | None = None) -> RequestRecord:
        """The record, failed where its output does not count; a counted answer judged
        against what the plan asked (its schema, its offered functions)."""
        if (problem := self.output_problem(record, output_len)) is not None:
            record.error = problem
        if record.ok and self.schema is not None:
            record.schema_valid = meets_schema(record.text, self.schema)
        if record.ok and self.tools is not None:
            record.tool_call_valid = valid_tool_answer(record.text, record.tool_calls, self.tools)
        return record


def finished(sent: RequestRecord | Unparsed) -> RequestRecord:
    """A sent request's complete record (parsing it now if it waited)."""
    return sent.parse() if isinstance(sent, Unparsed) else sent


class Workers(Protocol):
    """Where a level's workers send their requests: worker ``k`` always on its own
    connection."""

    async def open(self, count: int) -> None:
        """Have the first ``count`` workers' connections open (before the clock)."""

    async def send(
        self, worker: int, body: bytes, *, index: int, plan: RequestPlan, timeout_s: float
    ) -> RequestRecord | Unparsed:
        """One streamed request on worker ``worker``'s connection (its record may be
        parsed later: :func:`finished`)."""

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
    ) -> RequestRecord | Unparsed:
        sent, kept = await send_streamed(
            self.endpoint,
            self._connections.pop(worker, None),
            body,
            index=index,
            api=plan.api,
            timeout_s=timeout_s,
            reasoning_fields=plan.reasoning_fields,
            headers=plan.head_lines,
            clock=self.clock,
        )
        if kept is not None:
            self._connections[worker] = kept
        return sent

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
            headers=plan.headers,
        )

    async def aclose(self) -> None:
        for client in {id(c): c for c in self._clients}.values():
            await client.aclose()
        self._clients.clear()

    async def __aenter__(self) -> HttpxWorkers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def send_one(
    workers: Workers,
    plan: RequestPlan,
    index: int,
    prompt: str,
    output_len: int | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> RequestRecord:
    """One streamed request on worker 0's connection, its output checked
    (:meth:`RequestPlan.checked`): sequential requests, one at a time."""
    body = plan.body(prompt, output_len, history)
    sent = await workers.send(0, body, index=index, plan=plan, timeout_s=plan.request_timeout_s)
    return plan.checked(finished(sent), output_len)


class SequentialClient:
    """Blocking requests one after another on one kept connection (the single-request
    measurement, where each request is a pytest-benchmark round). Close it when done."""

    def __init__(self, base_url: str, plan: RequestPlan, workers: Workers | None = None) -> None:
        self.plan = plan
        self._loop = asyncio.new_event_loop()
        self._workers = workers if workers is not None else WireWorkers(base_url)
        self.sent = 0

    def send(
        self,
        prompt: str,
        output_len: int | None = None,
        history: Sequence[tuple[str, str]] = (),
    ) -> RequestRecord:
        """One streamed request, its output checked (:func:`send_one`)."""
        record = self._loop.run_until_complete(
            send_one(self._workers, self.plan, self.sent, prompt, output_len, history)
        )
        self.sent += 1
        return record

    def close(self) -> None:
        """Close the connection and the event loop."""
        self._loop.run_until_complete(self._workers.aclose())
        self._loop.close()
