"""OpenAI-shaped response bodies and stream chunks, encoded once and reused.

The generated text is deterministic: token ``p`` of every response is ``WORDS[p % len(WORDS)]``.
A chunk's bytes are the request's constant head (id, object, created, model) plus a choice
that depends only on the token positions it covers, cached across requests.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

from perfgate.sim.http import STREAM_END, frame

Api = Literal["completions", "chat"]
WORDS: tuple[str, ...] = tuple(f" {w}" for w in "the quick brown fox jumps over a lazy dog".split())
DONE = frame(b"data: [DONE]\n\n") + STREAM_END
MALFORMED_EVENT = frame(b"data: {not json\n\n")
FINISH_REASON = "length"  # the simulator always stops at max_tokens


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


_ROLE_CHOICE = _dumps(
    {
        "index": 0,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }
)


def words(start: int, count: int) -> str:
    """The text of tokens ``start`` .. ``start + count - 1``."""
    size = len(WORDS)
    return "".join(WORDS[(start + i) % size] for i in range(count))


@lru_cache(maxsize=16384)
def _choice(chat: bool, field: str, start: int, reasoning: int, content: int, last: bool) -> bytes:
    finish = FINISH_REASON if last else None
    if not chat:
        return _dumps(
            {"index": 0, "text": words(start, content), "logprobs": None, "finish_reason": finish}
        )
    delta: dict[str, str] = {}
    if reasoning:
        delta[field] = words(start, reasoning)
    if content:
        delta["content"] = words(start + reasoning, content)
    return _dumps({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish})


class StreamEncoder:
    """The chunks of one streamed response."""

    __slots__ = ("chat", "field", "head", "reasoning_tokens")

    def __init__(
        self,
        api: Api,
        request_id: str,
        model: str,
        created: int,
        *,
        reasoning_tokens: int = 0,
        reasoning_field: str = "reasoning_content",
    ) -> None:
        self.chat = api == "chat"
        self.field = reasoning_field
        self.reasoning_tokens = reasoning_tokens if self.chat else 0
        prefix, kind = (
            ("chatcmpl", "chat.completion.chunk") if self.chat else ("cmpl", "text_completion")
        )
        fixed = _dumps(
            {"id": f"{prefix}-{request_id}", "object": kind, "created": created, "model": model}
        )
        self.head = b"data: " + fixed[:-1] + b',"choices":['

    def _event(self, choice: bytes, tail: bytes = b"]}\n\n") -> bytes:
        size = len(self.head) + len(choice) + len(tail)
        return b"".join((b"%x\r\n" % size, self.head, choice, tail, b"\r\n"))

    def role(self) -> bytes:
        """The role-only first chunk of a chat stream (no token in it)."""
        return self._event(_ROLE_CHOICE)

    def tokens(self, start: int, count: int, last: bool) -> bytes:
        """The chunk carrying tokens ``start`` .. ``start + count - 1``."""
        reasoning = min(max(self.reasoning_tokens - start, 0), count)
        choice = _choice(
            self.chat, self.field, start % len(WORDS), reasoning, count - reasoning, last
        )
        return self._event(choice)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The final usage chunk (``choices`` empty)."""
        usage = _dumps(
            {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        )
        return self._event(b"", b'],"usage":' + usage + b"}\n\n")


BURST_ID = "burst"  # the request id in every chunk of a burst (SimConfig.burst)


@lru_cache(maxsize=64)
def burst_chunks(
    api: Api,
    model: str,
    total: int,
    per_chunk: int,
    usage_prompt_tokens: int | None,
    reasoning_tokens: int = 0,
    reasoning_field: str = "reasoning_content",
) -> bytes:
    """A whole stream's token chunks (then usage, when ``usage_prompt_tokens`` is given,
    and ``[DONE]``) as one buffer, shared by every request that asks the same: the id is
    :data:`BURST_ID` and ``created`` is 0, so that writing it costs the server almost nothing."""
    encoder = StreamEncoder(
        api,
        BURST_ID,
        model,
        0,
        reasoning_tokens=reasoning_tokens,
        reasoning_field=reasoning_field,
    )
    chunks = [
        encoder.tokens(start, min(per_chunk, total - start), start + per_chunk >= total)
        for start in range(0, total, per_chunk)
    ]
    if usage_prompt_tokens is not None:
        chunks.append(encoder.usage(usage_prompt_tokens, total))
    return b"".join([*chunks, DONE])


def error_event(status: int, message: str) -> bytes:
    """A ``data: {"error": ...}`` event, framed."""
    error = {"message": message, "type": "server_error", "param": None, "code": status}
    return frame(b"data: " + _dumps({"error": error}) + b"\n\n")


def completion_body(
    api: Api,
    request_id: str,
    model: str,
    created: int,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    reasoning_tokens: int = 0,
    reasoning_field: str = "reasoning_content",
) -> dict[str, Any]:
    """A non-streamed response."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if api == "completions":
        choice: dict[str, Any] = {
            "index": 0,
            "text": words(0, completion_tokens),
            "logprobs": None,
            "finish_reason": FINISH_REASON,
        }
        kind, prefix = "text_completion", "cmpl"
    else:
        reasoning = min(reasoning_tokens, completion_tokens)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": words(reasoning, completion_tokens - reasoning),
        }
        if reasoning:
            message[reasoning_field] = words(0, reasoning)
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": FINISH_REASON}
        kind, prefix = "chat.completion", "chatcmpl"
    return {
        "id": f"{prefix}-{request_id}",
        "object": kind,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
