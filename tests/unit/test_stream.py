"""The stream client on a mock transport with scripted timings: TTFT/ITL are exact."""

import json

import httpx
import pytest

from perfgate.client import request_body, stream_request
from perfgate.measure.metrics import inter_token_latencies, request_tpot
from tests.scripted import FakeClock, chat_chunk, client_for, completion_chunk, sse, usage_chunk

pytestmark = pytest.mark.asyncio


async def test_completion_ttft_itl_usage_exact():
    clock = FakeClock(100.0)
    script = [
        (100.25, completion_chunk("Hello")),
        (100.35, completion_chunk(" world")),
        (100.60, completion_chunk("!", finish="length")),
        (100.61, usage_chunk(12, 3)),
        (100.62, sse("[DONE]")),
    ]
    seen = []
    async with client_for(clock, script, seen=seen) as client:
        body = request_body("completions", "m", "prompt", 3, ignore_eos=True)
        record = await stream_request(client, body, clock=clock)
    assert record.ok, record.error
    assert record.ttft == pytest.approx(0.25)
    assert inter_token_latencies(record) == pytest.approx([0.10, 0.25])
    assert record.text == "Hello world!"
    assert record.finish_reason == "length"
    assert (record.prompt_tokens, record.completion_tokens) == (12, 3)
    assert record.latency == pytest.approx(0.62)
    assert request_tpot(record) == pytest.approx((0.62 - 0.25) / 2)
    assert seen[0]["stream_options"] == {"include_usage": True}
    assert seen[0]["ignore_eos"] is True and seen[0]["stream"] is True


async def test_role_only_and_empty_chunks_do_not_count_for_ttft():
    clock = FakeClock(0.0)
    script = [
        (0.1, chat_chunk({"role": "assistant"})),
        (0.2, chat_chunk({"content": ""})),
        (0.5, chat_chunk({"content": "Hi"})),
        (0.7, chat_chunk({}, finish="stop")),
        (0.8, sse("[DONE]")),
    ]
    async with client_for(clock, script) as client:
        record = await stream_request(
            client, request_body("chat", "m", "p", 8), api="chat", clock=clock
        )
    assert record.ttft == pytest.approx(0.5)
    assert record.token_times == [0.5]
    assert record.finish_reason == "stop"
    assert record.completion_tokens is None and record.output_tokens == 1


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_chunk_counts_as_first_token(field):
    clock = FakeClock(0.0)
    script = [
        (0.3, chat_chunk({field: "Let me think."})),
        (0.4, chat_chunk({"content": "42"}, finish="stop")),
        (0.5, sse("[DONE]")),
    ]
    async with client_for(clock, script) as client:
        record = await stream_request(
            client, request_body("chat", "m", "p", 8), api="chat", clock=clock
        )
    assert record.ttft == pytest.approx(0.3)
    assert record.reasoning == "Let me think."
    assert record.text == "42"
    assert record.ttfa == pytest.approx(0.4)  # the answer's first chunk, thinking skipped


async def test_time_to_the_first_answer_skips_every_reasoning_chunk_and_counts_them():
    """Three chunks of thinking, then the answer: TTFA is the fourth chunk's time, TTFT
    the first's; the thinking tokens are the chunks (no usage detail) or, where the
    server gives it, usage.completion_tokens_details.reasoning_tokens."""
    clock = FakeClock(0.0)
    usage = {"prompt_tokens": 5, "completion_tokens": 5}
    script = [
        (0.1, chat_chunk({"reasoning_content": "a"})),
        (0.2, chat_chunk({"reasoning_content": "b"})),
        (0.3, chat_chunk({"reasoning_content": "c"})),
        (0.7, chat_chunk({"content": "4"})),
        (0.8, chat_chunk({"content": "2"}, finish="stop")),
        (0.9, sse(json.dumps({"choices": [], "usage": usage}))),
        (1.0, sse("[DONE]")),
    ]
    async with client_for(clock, script) as client:
        record = await stream_request(
            client, request_body("chat", "m", "p", 8), api="chat", clock=clock
        )
    assert (record.ttft, record.ttfa) == (pytest.approx(0.1), pytest.approx(0.7))
    assert record.reasoning_chunks == 3 and record.thinking_tokens == 3
    detailed = {**usage, "completion_tokens_details": {"reasoning_tokens": 7}}
    script[5] = (0.9, sse(json.dumps({"choices": [], "usage": detailed})))
    clock = FakeClock(0.0)
    async with client_for(clock, script) as client:
        record = await stream_request(
            client, request_body("chat", "m", "p", 8), api="chat", clock=clock
        )
    assert record.reasoning_chunks == 3 and record.thinking_tokens == 7


async def test_a_model_that_does_not_reason_has_its_answer_at_the_first_token():
    clock = FakeClock(0.0)
    script = [(0.2, completion_chunk("ab", finish="stop")), (0.3, sse("[DONE]"))]
    async with client_for(clock, script) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 4), clock=clock)
    assert record.ttfa == record.ttft == pytest.approx(0.2)
    assert record.reasoning_chunks == 0 and record.thinking_tokens == 0


async def test_chunks_split_mid_event_are_stamped_on_completion():
    clock = FakeClock(0.0)
    whole = completion_chunk("abc", finish="stop")
    script = [(0.2, whole[:7]), (0.9, whole[7:]), (1.0, sse("[DONE]"))]
    async with client_for(clock, script) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 4), clock=clock)
    assert record.token_times == [0.9]


async def test_http_error_becomes_a_failed_record():
    clock = FakeClock(0.0)
    script = [(0.1, b'{"error": {"message": "max_tokens must be positive"}}')]
    async with client_for(clock, script, status=400) as client:
        record = await stream_request(
            client, request_body("completions", "m", "p", -1), clock=clock
        )
    assert not record.ok
    assert record.status == 400
    assert "HTTP 400" in record.error and "max_tokens must be positive" in record.error


async def test_error_event_in_stream_becomes_a_failed_record():
    clock = FakeClock(0.0)
    script = [(0.1, completion_chunk("a")), (0.2, sse({"error": {"message": "boom"}}))]
    async with client_for(clock, script) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 4), clock=clock)
    assert not record.ok and "boom" in record.error


async def test_stream_cut_before_finish_reason_is_a_failure():
    clock = FakeClock(0.0)
    script = [(0.1, completion_chunk("a"))]
    async with client_for(clock, script) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 4), clock=clock)
    assert record.error == "stream ended without a finish_reason"


async def test_connection_error_never_raises():
    def refuse(request):
        raise httpx.ConnectError("connection refused")

    async with httpx.AsyncClient(
        transport=httpx.MockTransport(refuse), base_url="http://test"
    ) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 4))
    assert not record.ok and "ConnectError" in record.error


async def test_request_deadline_becomes_a_failed_record():
    import asyncio

    class Stall(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield completion_chunk("a")
            await asyncio.sleep(10)
            yield completion_chunk("b", finish="stop")

    def handler(request):
        return httpx.Response(200, stream=Stall())

    async with httpx.AsyncClient(
        transport=httpx.MockTransport(handler), base_url="http://test"
    ) as client:
        record = await stream_request(
            client, request_body("completions", "m", "p", 4), timeout_s=0.2
        )
    assert not record.ok and "deadline" in record.error
    assert len(record.token_times) == 1


async def test_invalid_json_in_stream_is_a_failed_record():
    clock = FakeClock(0.0)
    async with client_for(clock, [(0.1, b"data: {not json\n\n")]) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 4), clock=clock)
    assert not record.ok and "invalid JSON" in record.error


STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"".join(
        b"%x\r\n%s\r\n" % (len(event), event)
        for event in (
            b'data: {"choices":[{"text":"a","finish_reason":"length"}]}\n\n',
            b"data: [DONE]\n\n",
        )
    )
    + b"0\r\n\r\n"
)


async def closing_server(cut_mid_stream: bool = False):
    """A raw HTTP/1.1 server that answers one streamed request per connection and then
    closes it without saying so, just as the next request arrives (the race seen with
    llama.cpp's server); or cuts the stream after its headers. Returns (server,
    base_url, connections accepted)."""
    import asyncio

    accepted = []

    async def handle(reader, writer):
        accepted.append(1)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))  # fmt: skip
        await reader.readexactly(length)
        writer.write(STREAM[: STREAM.index(b"\r\n\r\n") + 4] if cut_mid_stream else STREAM)
        await writer.drain()
        if not cut_mid_stream:
            await reader.read(1)  # the next request is on its way: close unanswered
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", accepted


async def test_a_kept_connection_the_server_closed_is_retried_once_on_a_new_one():
    from perfgate.client.transport import pooled_client

    server, url, accepted = await closing_server()
    async with server, pooled_client(url, 1, 10) as client:
        body = request_body("completions", "m", "p", 1)
        first = await stream_request(client, body)
        second = await stream_request(client, body)  # goes out on the closed connection
    assert first.ok and first.reconnects == 0
    assert second.ok and second.reconnects == 1 and second.text == "a"
    assert len(accepted) == 2
    assert second.sent is not None and second.sent > second.start


async def test_a_stream_cut_after_the_response_began_is_a_failure_not_a_retry():
    from perfgate.client.transport import pooled_client

    server, url, accepted = await closing_server(cut_mid_stream=True)
    async with server, pooled_client(url, 1, 10) as client:
        record = await stream_request(client, request_body("completions", "m", "p", 1))
    assert not record.ok and record.reconnects == 0 and len(accepted) == 1
    assert record.status == 200 and "RemoteProtocolError" in (record.error or "")


async def test_streamed_tool_calls_are_joined_by_index_and_bear_tokens():
    """Two parallel calls streamed in pieces, as OpenAI-compatible servers send them (the
    id and name once, the arguments' JSON in fragments; written here from the API's
    shape): each call whole, in index order; their chunks bear tokens, and the first is
    where the answer starts."""
    clock = FakeClock(0.0)

    def call(index, **piece):
        return chat_chunk({"tool_calls": [{"index": index, **piece}]})

    script = [
        (0.1, chat_chunk({"role": "assistant"})),
        (0.2, call(0, id="c0", type="function", function={"name": "get_weather", "arguments": ""})),
        (0.3, call(0, function={"arguments": '{"city": '})),
        (0.4, call(0, function={"arguments": '"Paris"}'})),
        (0.5, call(1, id="c1", type="function", function={"name": "get_weather"})),
        (0.6, call(1, function={"arguments": '{"city": "Rome"}'})),
        (0.7, chat_chunk({}, finish="tool_calls")),
        (0.8, sse("[DONE]")),
    ]
    async with client_for(clock, script) as client:
        record = await stream_request(
            client, request_body("chat", "m", "p", 32), api="chat", clock=clock
        )
    assert record.ok and record.finish_reason == "tool_calls"
    assert record.tool_calls == [
        {"id": "c0", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"id": "c1", "name": "get_weather", "arguments": '{"city": "Rome"}'},
    ]
    assert record.text == "" and len(record.token_times) == 5
    assert record.ttft == record.ttfa == pytest.approx(0.2)
