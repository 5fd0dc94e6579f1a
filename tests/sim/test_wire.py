"""The lean measurement client (``perfgate.client.wire`` through ``WireWorkers``):
the same records as the httpx path, on the simulator's faults and on raw servers that
split, close and stall."""

from __future__ import annotations

import asyncio

import pytest

from perfgate.client import encode_body, request_body
from perfgate.client.wire import Endpoint, header_lines
from perfgate.load.workers import RequestPlan, WireWorkers, finished
from perfgate.sim import SimConfig, serve, words

PLAN = RequestPlan(api="completions", model="sim", output_len=5, request_timeout_s=10)
CHAT = RequestPlan(api="chat", model="sim", output_len=5, request_timeout_s=10)
FAST = SimConfig(ttft_s=0.002, itl_s=0.001)


async def send(workers: WireWorkers, *args, **kwargs):
    """One request's complete record (measured requests are parsed after their level)."""
    return finished(await workers.send(*args, **kwargs))


def body(plan: RequestPlan = PLAN, **extra: object) -> bytes:
    return encode_body(
        request_body(plan.api, "sim", "one two three", plan.output_len, **extra)  # type: ignore[arg-type]
    )


@pytest.mark.asyncio
async def test_completion_and_chat_streams_match_the_servers_truth():
    config = FAST.with_changes(tokens_per_chunk=2, reasoning_tokens=2)
    async with serve(config) as url, WireWorkers(url) as workers:
        await workers.open(1)
        done = await send(workers, 0, body(), index=0, plan=PLAN, timeout_s=10)
        chat = await send(workers, 0, body(CHAT), index=1, plan=CHAT, timeout_s=10)
    assert done.ok and chat.ok, (done.error, chat.error)
    assert done.text == words(0, 5) and done.completion_tokens == 5
    assert len(done.token_times) == 3 and done.finish_reason == "length"
    assert done.sent is not None and done.start <= done.sent < done.token_times[0]
    assert chat.reasoning and chat.text and len(chat.token_times) == 3
    assert done.reconnects == chat.reconnects == 0


FAULTS = [
    ({"kind": "http_error", "status": 503}, "HTTP 503", 0),
    ({"kind": "cut", "after": 2}, "connection lost mid-response", 2),
    ({"kind": "malformed", "after": 2}, "invalid JSON in stream", 2),
    ({"kind": "error_event", "after": 1}, "server error in stream", 1),
    ({"kind": "stall", "after": 1, "stall_s": 0.05}, None, 5),
]


@pytest.mark.parametrize(("fault", "error", "chunks"), FAULTS)
@pytest.mark.asyncio
async def test_faults_become_the_records_error_and_the_worker_recovers(fault, error, chunks):
    async with serve(FAST) as url, WireWorkers(url) as workers:
        record = await send(workers, 0, body(sim_fault=fault), index=0, plan=PLAN, timeout_s=10)
        after = await send(workers, 0, body(), index=1, plan=PLAN, timeout_s=10)
    if error is None:
        assert record.ok, record.error
    else:
        assert record.error is not None and error in record.error, record.error
    assert len(record.token_times) == chunks
    assert after.ok, after.error


@pytest.mark.asyncio
async def test_a_stalled_stream_hits_the_deadline_and_the_next_request_reconnects():
    stall = {"kind": "stall", "after": 1, "stall_s": 5}
    async with serve(FAST) as url, WireWorkers(url) as workers:
        slow = await send(workers, 0, body(sim_fault=stall), index=0, plan=PLAN, timeout_s=0.3)
        after = await send(workers, 0, body(), index=1, plan=PLAN, timeout_s=10)
    assert not slow.ok and "deadline of 0.3s exceeded" in (slow.error or "")
    assert after.ok


async def raw_server(responses: list[list[bytes]], close_after_each: bool = False):
    """A raw HTTP/1.1 server: each request gets the next response, written in the given
    pieces with a pause between them; optionally the connection closes, unannounced,
    as the next request arrives."""
    served = []

    async def handle(reader, writer):
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            served.append(1)
            for piece in responses[(len(served) - 1) % len(responses)]:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)
            if close_after_each:
                await reader.read(1)
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", served


EVENT = b'data: {"choices":[{"text":"a","finish_reason":"length"}]}\n\n'
DONE = b"data: [DONE]\n\n"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"


def chunk(data: bytes, extension: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), extension, data)


@pytest.mark.asyncio
async def test_chunks_split_anywhere_and_chunk_extensions_are_read():
    whole = HEAD + b"\r\n" + chunk(EVENT, b";name=x") + chunk(DONE) + b"0\r\nx-trailer: 1\r\n\r\n"
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]  # every 7 bytes
    server, url, _ = await raw_server([pieces])
    async with server, WireWorkers(url) as workers:
        record = await send(workers, 0, body(), index=0, plan=PLAN, timeout_s=10)
        again = await send(workers, 0, body(), index=1, plan=PLAN, timeout_s=10)
    assert record.ok and record.text == "a" and len(record.token_times) == 1, record.error
    assert again.ok and again.reconnects == 0  # the connection was kept


@pytest.mark.asyncio
async def test_content_length_and_connection_close_responses():
    error = b'{"error":{"message":"bad"}}'
    reply = b"HTTP/1.1 400 Bad\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
        len(error),
        error,
    )
    server, url, served = await raw_server([[reply]])
    async with server, WireWorkers(url) as workers:
        first = await send(workers, 0, body(), index=0, plan=PLAN, timeout_s=10)
        second = await send(workers, 0, body(), index=1, plan=PLAN, timeout_s=10)
    assert first.status == 400 and first.error == 'HTTP 400: {"error":{"message":"bad"}}'
    assert second.status == 400 and second.reconnects == 0  # closed on purpose: a new one
    assert len(served) == 2


@pytest.mark.asyncio
async def test_a_kept_connection_closed_by_the_server_is_replaced_once():
    whole = HEAD + b"\r\n" + chunk(EVENT) + chunk(DONE) + b"0\r\n\r\n"
    server, url, served = await raw_server([[whole]], close_after_each=True)
    async with server, WireWorkers(url) as workers:
        first = await send(workers, 0, body(), index=0, plan=PLAN, timeout_s=10)
        second = await send(workers, 0, body(), index=1, plan=PLAN, timeout_s=10)
    assert first.ok and first.reconnects == 0
    assert second.ok and second.reconnects == 1 and len(served) == 2


def test_endpoint_reads_base_urls():
    plain = Endpoint("http://127.0.0.1:8000")
    assert (plain.host, plain.port, plain.tls, plain.prefix) == ("127.0.0.1", 8000, False, "")
    assert plain.head("/v1/completions", 12).startswith(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
    )
    prefixed = Endpoint("https://example.com/api/")
    assert (prefixed.port, prefixed.tls, prefixed.authority) == (443, True, "example.com")
    assert prefixed.head("/v1/chat/completions", 1).startswith(b"POST /api/v1/chat/completions")
    with pytest.raises(ValueError, match="not an http"):
        Endpoint("unix:///tmp/x")


def test_extra_headers_go_into_the_head_once_encoded_and_a_broken_one_is_refused():
    extra = header_lines({"Authorization": "Bearer k1", "X-Team": "perf"})
    head = Endpoint("http://127.0.0.1:8000").head("/v1/completions", 12, extra)
    assert head.endswith(b"Content-Length: 12\r\nAuthorization: Bearer k1\r\nX-Team: perf\r\n\r\n")
    assert head.count(b"\r\n\r\n") == 1
    for name, value in (("X-A", "v\r\nX-Injected: 1"), ("Bad Name", "v"), ("", "v")):
        with pytest.raises(ValueError, match="not a valid HTTP header"):
            header_lines({name: value})
