"""A scripted SSE server on httpx's mock transport: exact timings, no network."""

from __future__ import annotations

import json

import httpx


class FakeClock:
    """A clock the scripted stream moves forward."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedStream(httpx.AsyncByteStream):
    """Yields (time, bytes) pairs, setting the fake clock before each chunk."""

    def __init__(self, clock: FakeClock, script: list[tuple[float, bytes]]) -> None:
        self.clock = clock
        self.script = script

    async def __aiter__(self):
        for at, chunk in self.script:
            self.clock.now = at
            yield chunk


def sse(obj) -> bytes:
    payload = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {payload}\n\n".encode()


def completion_chunk(text: str, finish: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "text": text, "finish_reason": finish}]})


def chat_chunk(delta: dict, finish: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def usage_chunk(prompt: int, completion: int) -> bytes:
    return sse({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


def client_for(
    clock: FakeClock, script: list[tuple[float, bytes]], status: int = 200, seen: list | None = None
) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(request.content))
        return httpx.Response(
            status,
            stream=ScriptedStream(clock, script),
            headers={"content-type": "text/event-stream"},
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://test")
