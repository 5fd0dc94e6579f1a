"""One streamed request becomes one ``RequestRecord``. Never raises on request failure.

Timestamps come from an injectable clock (``time.perf_counter`` by default) taken
when bytes arrive, before parsing. A chunk is *token-bearing* when it carries
content, reasoning text or a piece of a tool call; role-only, empty and usage-only chunks
are not. The first chunk that carries answer text (content, a completion's text, or a tool
call) is kept as ``answer_chunk``:
time to the first answer token (TTFA) skips a reasoning model's thinking, TTFT does not.

TTFT and latency count from ``sent``, when the request's last byte was written to
its connection (stamped by the connection itself, :mod:`perfgate.client.transport`):
connection setup and the harness's own delay before that are not the server's. That
delay is kept as ``client_delay``.

After ``[DONE]`` the rest of the body (the chunked encoding's last chunk) is read, so
that the connection goes back to the pool instead of being dropped. A kept connection
that the server closed meanwhile (llama.cpp's server closes some after a stream ends,
and the request goes out before its FIN arrives) fails before any response byte; such
a request is sent again at once on a new connection, and ``reconnects`` counts it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from perfgate.client.sse import SSEDecoder
from perfgate.client.transport import sent_at
from perfgate.client.wire import ConnectionClosed, Endpoint, Response, WireConnection, exchange

Api = Literal["completions", "chat"]
API_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ERROR_BODY_LIMIT = 2000


@dataclass(slots=True)
class RequestRecord:
    """Raw facts of one request; every metric is derived from these."""

    index: int
    start: float  # when the harness began this request
    end: float = 0.0
    sent: float | None = None  # when its body was written out (None: not known)
    token_times: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    reasoning: str = ""
    error: str | None = None
    status: int | None = None
    server_timings: dict[str, Any] | None = None
    reconnects: int = 0  # kept connections found closed by the server, retried at once
    scheduled: float | None = None  # open loop: when the arrival schedule said to send it
    answer_chunk: int | None = None  # index in token_times of the first answer-bearing chunk
    reasoning_chunks: int = 0  # token-bearing chunks that carried reasoning text
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    tool_calls: list[dict[str, str]] | None = None  # streamed calls: id, name, arguments
    # the answer judged against what its request asked (None: it asked for nothing):
    # JSON valid against its response_format; a valid call of an offered function
    schema_valid: bool | None = None
    tool_call_valid: bool | None = None

    @property
    def ok(self) -> bool:
        """The request completed with a finish reason and no error."""
        return self.error is None

    @property
    def origin(self) -> float:
        """Where TTFT and latency count from: an open-loop request's scheduled time (so a
        wait before sending, client-side or for a free slot, is in them), else when the
        request left (``sent`` where known, else ``start``)."""
        if self.scheduled is not None:
            return self.scheduled
        return self.start if self.sent is None else self.sent

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first token-bearing chunk."""
        return self.token_times[0] - self.origin if self.token_times else None

    @property
    def ttfa(self) -> float | None:
        """Seconds from sending to the first chunk that carries answer text (content, or a
        completion's text), reasoning skipped; None when no answer text came."""
        if self.answer_chunk is None:
            return None
        return self.token_times[self.answer_chunk] - self.origin

    @property
    def thinking_tokens(self) -> int:
        """Reasoning tokens: the server's usage detail where it gives a count, else the
        chunks that carried reasoning text (vLLM 0.32 says 0 beside streamed reasoning)."""
        return self.reasoning_tokens or self.reasoning_chunks

    @property
    def latency(self) -> float:
        """Seconds from sending to the end of the stream."""
        return self.end - self.origin

    @property
    def client_delay(self) -> float | None:
        """Seconds the harness took from starting the request (open loop: from its
        scheduled time) to sending its last byte, connection setup included: the
        client-side wait, not the server's time."""
        if self.sent is None:
            return None
        return self.sent - (self.start if self.scheduled is None else self.scheduled)

    @property
    def output_tokens(self) -> int:
        """Output tokens: the server's usage where given, else token-bearing chunks."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return len(self.token_times)


def request_body(
    api: Api,
    model: str,
    prompt: str,
    max_tokens: int,
    history: Sequence[tuple[str, str]] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A streaming request body with usage reporting switched on; ``history``: earlier
    (user, reply) turns of the conversation, resent before ``prompt`` (chat: as messages;
    completions: as one transcript)."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        body["messages"] = [
            *(
                m
                for user, reply in history
                for m in (
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": reply},
                )
            ),
            {"role": "user", "content": prompt},
        ]
    else:
        body["prompt"] = "\n\n".join([*(f"{u}\n\n{r}" for u, r in history), prompt])
    body.update(extra)
    return body


class _Parser:
    """Applies parsed chunks to a record; kept apart from I/O so it stays cheap."""

    __slots__ = (
        "api",
        "calls",
        "done",
        "reasoning_fields",
        "reasoning_parts",
        "record",
        "text_parts",
    )

    def __init__(self, record: RequestRecord, api: Api, reasoning_fields: tuple[str, ...]) -> None:
        self.record = record
        self.api = api
        self.reasoning_fields = reasoning_fields
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.done = False

    def event(self, data: str, now: float) -> None:
        if data == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self.record.error = f"invalid JSON in stream: {data[:200]!r}"
            self.done = True
            return
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            self.record.error = f"server error in stream: {json.dumps(chunk['error'])[:500]}"
            self.done = True
            return
        usage = chunk.get("usage")
        if usage:
            self.record.prompt_tokens = usage.get("prompt_tokens")
            self.record.completion_tokens = usage.get("completion_tokens")
            details = usage.get("completion_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
                self.record.reasoning_tokens = details["reasoning_tokens"]
        if "timings" in chunk:
            self.record.server_timings = chunk["timings"]
        for choice in chunk.get("choices") or ():
            calls = None
            if self.api == "chat":
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                thought = None
                for name in self.reasoning_fields:
                    thought = delta.get(name) or thought
                if calls := delta.get("tool_calls"):
                    self.tool_call_parts(calls)
            else:
                piece = choice.get("text")
                thought = None
            if piece or thought or calls:
                record = self.record
                record.token_times.append(now)
                if (piece or calls) and record.answer_chunk is None:
                    record.answer_chunk = len(record.token_times) - 1
                if piece:
                    self.text_parts.append(piece)
                if thought:
                    record.reasoning_chunks += 1
                    self.reasoning_parts.append(thought)
            reason = choice.get("finish_reason")
            if reason:
                self.record.finish_reason = reason

    def tool_call_parts(self, parts: list[Any]) -> None:
        """Streamed tool calls arrive in pieces, by ``index``: the id and name once, the
        arguments' JSON text in fragments."""
        for part in parts:
            if not isinstance(part, dict):
                continue
            call = self.calls.setdefault(
                part.get("index", 0), {"id": "", "name": "", "arguments": ""}
            )
            call["id"] = part.get("id") or call["id"]
            function = part.get("function") or {}
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""

    def close(self) -> None:
        if self.calls:
            self.record.tool_calls = [self.calls[i] for i in sorted(self.calls)]
        self.record.text = "".join(self.text_parts)
        self.record.reasoning = "".join(self.reasoning_parts)
        if self.record.error is None and self.record.finish_reason is None:
            self.record.error = "stream ended without a finish_reason"


JSON_HEADERS = {"content-type": "application/json"}
DRAIN_S = 1.0  # how long to wait for the body's end after [DONE] before dropping it


def encode_body(body: dict[str, Any]) -> bytes:
    """A request body as the bytes sent (encode before the clock starts)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


async def stream_request(
    client: httpx.AsyncClient,
    body: dict[str, Any] | bytes,
    *,
    index: int = 0,
    api: Api = "completions",
    timeout_s: float = 120.0,
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning"),
    headers: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestRecord:
    """Send one streaming request and record it. Failures become ``record.error``.
    ``body``: a dict, or its bytes already encoded (:func:`encode_body`); ``headers``:
    extra ones (an API key)."""
    content = body if isinstance(body, bytes) else encode_body(body)
    sent_headers = {**JSON_HEADERS, **headers} if headers else JSON_HEADERS
    record = RequestRecord(index=index, start=clock())
    parser = _Parser(record, api, reasoning_fields)
    decoder = SSEDecoder()
    end: float | None = None
    try:
        async with asyncio.timeout(timeout_s):
            for attempt in (1, 2):
                try:
                    async with client.stream(
                        "POST", API_PATHS[api], content=content, headers=sent_headers
                    ) as response:
                        end = await _read(response, record, parser, decoder, clock)
                    break
                except httpx.RemoteProtocolError:
                    if attempt == 2 or record.status is not None:
                        raise
                    record.reconnects += 1  # a kept connection the server had closed
    except TimeoutError:
        record.error = (
            f"request deadline of {timeout_s:.1f}s exceeded after "
            f"{len(record.token_times)} token chunks"
        )
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc or 'connection lost'}"
    except Exception as exc:
        record.error = f"unexpected {type(exc).__name__}: {exc}"
    record.end = clock() if end is None else end
    parser.close()
    return record


async def _read(
    response: httpx.Response,
    record: RequestRecord,
    parser: _Parser,
    decoder: SSEDecoder,
    clock: Callable[[], float],
) -> float | None:
    """Read one response into the record; the time of ``[DONE]``, if it came."""
    record.sent = sent_at(response)
    record.status = response.status_code
    if response.status_code >= 400:
        raw = await response.aread()
        text = raw[:ERROR_BODY_LIMIT].decode(errors="replace")
        record.error = f"HTTP {response.status_code}: {text}"
        return None
    chunks = response.aiter_raw()
    async for raw in chunks:
        now = clock()
        for data in decoder.feed(raw):
            parser.event(data, now)
        if parser.done:
            await _drain(chunks)
            return now
    for data in decoder.finish():
        parser.event(data, clock())
    return None


@dataclass(slots=True)
class Unparsed:
    """A measured request whose response has not been parsed yet: its record has the
    times (start, sent, end), status and reconnects; :meth:`parse` reads the body. Parsing
    waits until the level's requests are all done, so that the event loop spends the
    measured time on I/O alone (256 streams ending together, parsed at once, stalled it
    for half a second)."""

    record: RequestRecord
    response: Response | None
    api: Api
    reasoning_fields: tuple[str, ...]

    def parse(self) -> RequestRecord:
        """The record, complete: tokens and their times, text, usage, finish, errors."""
        record, response = self.record, self.response
        if response is None:
            return record
        parser = _Parser(record, self.api, self.reasoning_fields)
        if response.status is not None and response.status >= 400:
            text = response.body[:ERROR_BODY_LIMIT].decode(errors="replace")
            record.error = f"HTTP {response.status}: {text}"
        else:  # what arrived, also before a failure
            decoder = SSEDecoder()
            for at, piece in zip(response.times, response.pieces, strict=True):
                for data in decoder.feed(piece):
                    parser.event(data, at)
                if parser.done:
                    record.end = at  # [DONE]: what follows is framing
                    break
            if not parser.done and response.error is None:
                for data in decoder.finish():
                    parser.event(data, record.end)
        if response.error is not None and record.error is None:
            record.error = response.error
        parser.close()
        self.response = None
        return record


async def send_streamed(
    endpoint: Endpoint,
    connection: WireConnection | None,
    body: bytes,
    *,
    index: int = 0,
    api: Api = "completions",
    timeout_s: float = 120.0,
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning"),
    headers: bytes = b"",
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[Unparsed, WireConnection | None]:
    """:func:`stream_request` on the lean client (:mod:`perfgate.client.wire`), for the
    measured requests: the same record, stamped closer to the wire at a fraction of the
    CPU, parsed later (:meth:`Unparsed.parse`). Returns it and the connection to keep
    (None: it was dropped)."""
    record = RequestRecord(index=index, start=clock())
    try:
        response, connection, record.reconnects = await exchange(
            endpoint,
            connection,
            API_PATHS[api],
            body,
            timeout_s=timeout_s,
            headers=headers,
            clock=clock,
        )
    except TimeoutError:
        record.error = f"request deadline of {timeout_s:.1f}s exceeded"
        record.end = clock()
        return Unparsed(record, None, api, reasoning_fields), None
    except (OSError, ConnectionClosed) as exc:
        record.error = f"{type(exc).__name__}: {exc or 'connection lost'}"
        record.end = clock()
        return Unparsed(record, None, api, reasoning_fields), None
    record.sent, record.status = response.sent, response.status
    record.end = response.end if response.end is not None else clock()
    kept = None if connection.closed else connection
    return Unparsed(record, response, api, reasoning_fields), kept


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows ``[DONE]`` (normally just the body's end) so the connection is
    reused; a server that keeps the body open past ``DRAIN_S`` loses the connection."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in chunks:
                pass
    except (TimeoutError, httpx.HTTPError):
        pass
