"""A llama-server stand-in on ``httpx.MockTransport``, for unit tests that drive a whole
run through the session with no socket and no process.

Written from llama-server's documented API (/health, /props, /tokenize, /detokenize,
/metrics, /v1/completions and /v1/chat/completions with SSE and usage; a chat answer in
JSON for a response_format, a call for tools, as OpenAI's API documents them) as perfgate
reads it: it proves the run's
own logic on it, nothing about llama.cpp (the engines tier runs the real server). Its
timing comes from asyncio sleeps: a first token after ``ttft_s``, then one token each
``itl_s``; ``slow`` multiplies both for the requests it is set during.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx


@dataclass
class MockLlamaServer:
    ttft_s: float = 0.02
    itl_s: float = 0.005
    slow: float = 1.0  # a factor on both delays (set it between runs)
    slots: int | None = None  # past this many streams at once, the first token waits longer
    broken: tuple[str, ...] = ()  # paths answered 500 (e.g. "/metrics", "/health")
    # chat answers when a request asks for a shape: its JSON (response_format), its one
    # call (tools offered); None: words, as a server that ignores the field (or whose
    # tool parser is off: the call then comes back as text in content)
    json_answer: str | None = None
    tool_call: dict | None = None  # {"name": ..., "arguments": "<JSON text>"}
    call_as_text: bool = False  # tools offered: the call's text in content, not parsed
    requests: int = 0  # completions served (streamed or not)
    tokens: int = 0  # tokens generated
    streaming: int = 0  # streams in flight now
    paths: list[str] = field(default_factory=list)  # every path asked, in order
    _vocabulary: dict[str, int] = field(default_factory=dict)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def _ids(self, text: str) -> list[int]:
        return [self._vocabulary.setdefault(w, len(self._vocabulary)) for w in text.split()]

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        body = json.loads(request.content or b"{}") if request.method == "POST" else {}
        if path in self.broken:
            return httpx.Response(500, json={"error": {"message": f"{path} is broken"}})
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/props":
            settings = {"n_ctx": 4096}
            return httpx.Response(
                200,
                json={"build_info": "b1-mock", "total_slots": 4,
                      "default_generation_settings": settings},
            )  # fmt: skip
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": self._ids(body["content"])})
        if path == "/detokenize":
            words = {i: w for w, i in self._vocabulary.items()}
            return httpx.Response(200, json={"content": " ".join(words[i] for i in body["tokens"])})
        if path == "/metrics":
            text = (
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {self.tokens}\n"
                "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
            )
            return httpx.Response(200, text=text)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "mock"}]})
        if path == "/v1/completions":
            return self._completion(body)
        if path == "/v1/chat/completions":
            return self._chat(body)
        return httpx.Response(404, json={"error": {"message": f"no {path}"}})

    def _completion(self, body: dict) -> httpx.Response:
        n = int(body.get("max_tokens") or 16)
        prompt_tokens = len(str(body.get("prompt", "")).split())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                 "total_tokens": prompt_tokens + n}  # fmt: skip
        self.requests += 1
        if not body.get("stream"):
            self.tokens += n
            text = " tok" * n
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            return httpx.Response(200, json={"choices": [choice], "usage": usage})
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self._stream(n, usage)
        )

    def _chat(self, body: dict) -> httpx.Response:
        """A streamed chat answer: JSON where a response_format asks and ``json_answer``
        is set, a call where tools are offered and ``tool_call`` is set, else words."""
        n = int(body.get("max_tokens") or 16)
        deltas: list[dict] = [{"content": " tok"}] * n
        finish = "length"
        if body.get("response_format") and self.json_answer is not None:
            text = self.json_answer
            deltas, finish = [{"content": text[i : i + 4]} for i in range(0, len(text), 4)], "stop"
        if body.get("tools") and self.tool_call is not None:
            call = self.tool_call
            if self.call_as_text:
                text = f"<tool_call>{json.dumps(call)}</tool_call>"
                deltas, finish = (
                    [{"content": text[i : i + 4]} for i in range(0, len(text), 4)],
                    "stop",
                )
            else:
                head = {"index": 0, "id": "call_0", "type": "function",
                        "function": {"name": call["name"], "arguments": ""}}  # fmt: skip
                args = call["arguments"]
                pieces = [args[i : i + 4] for i in range(0, len(args), 4)]
                deltas = [{"tool_calls": [head]}] + [
                    {"tool_calls": [{"index": 0, "function": {"arguments": a}}]} for a in pieces
                ]
                finish = "tool_calls"
        usage = {"prompt_tokens": 8, "completion_tokens": len(deltas),
                 "total_tokens": 8 + len(deltas)}  # fmt: skip
        self.requests += 1
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=self._stream(len(deltas), usage, deltas, finish),
        )

    async def _stream(
        self, n: int, usage: dict, deltas: list[dict] | None = None, finish: str = "length"
    ) -> AsyncIterator[bytes]:
        self.streaming += 1
        try:
            async for chunk in self._chunks(n, usage, deltas, finish):
                yield chunk
        finally:
            self.streaming -= 1

    async def _chunks(
        self, n: int, usage: dict, deltas: list[dict] | None, finish: str
    ) -> AsyncIterator[bytes]:
        queued = max(1.0, self.streaming / self.slots) if self.slots else 1.0
        await asyncio.sleep(self.ttft_s * self.slow * queued)
        for i in range(n):
            if i:
                await asyncio.sleep(self.itl_s * self.slow)
            last = i == n - 1
            ends = finish if last else None
            if deltas is None:  # a completion
                choice = {"index": 0, "text": " tok", "finish_reason": ends}
            else:
                choice = {"index": 0, "delta": deltas[i], "finish_reason": ends}
            self.tokens += 1
            yield f"data: {json.dumps({'choices': [choice]})}\n\n".encode()
        yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"
