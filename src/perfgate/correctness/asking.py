"""How the correctness checks ask a model, whatever its API, kind and chunking.

Three things decide how a question is sent and how the answer is read:

- **the API**: completions (raw prompt) or chat (the server applies the model's chat
  template), from the profile's ``correctness.prompt_style``;
- **the model kind**: a *base* model continues text and never ends on its own; an
  *instruct* model answers through chat and ends on its own; a *reasoning* model thinks
  first (its reasoning parser puts that in ``reasoning_content`` / ``reasoning``), so
  every budget gets ``reasoning_budget`` more tokens, stop strings are not sent (they
  would cut the thinking) and the answer judged is the content after the reasoning;
- **chunking**: a streamed chunk carries one token or several (speculative decoding),
  so token-bearing chunks ≤ ``usage.completion_tokens``, never equality.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx

from perfgate.client import SimpleClient
from perfgate.correctness.quality import leaked_markers, message_reasoning
from perfgate.profile import CorrectnessSpec

ModelKind = Literal["base", "instruct", "reasoning"]


def model_kind(spec: CorrectnessSpec) -> ModelKind:
    """The kind of model a profile's correctness settings describe."""
    if spec.reasoning:
        return "reasoning"
    return "instruct" if spec.prompt_style == "chat" else "base"


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer, streamed or not, read the same way."""

    content: str
    reasoning: str
    finish_reason: str | None
    completion_tokens: int | None
    prompt_tokens: int | None
    chunks: int | None = None  # token-bearing chunks; streamed answers only
    error: str | None = None
    reasoning_tokens: int | None = None  # thinking tokens, where the server or stream says
    tool_calls: list[dict[str, str]] | None = None  # each call's id, name and arguments text

    @property
    def first_line(self) -> str:
        """The first non-blank line of the content (what a one-line question asks for)."""
        return next((line for line in self.content.splitlines() if line.strip()), "")

    def chunk_problem(self) -> str | None:
        """Why the chunk count contradicts the server's usage (None when consistent)."""
        if self.chunks is None or self.completion_tokens is None:
            return None
        if self.completion_tokens > 0 and self.chunks == 0:
            return f"usage says {self.completion_tokens} tokens but no chunk carried text"
        if self.chunks > self.completion_tokens:
            return (
                f"{self.chunks} token-bearing chunks but usage.completion_tokens "
                f"{self.completion_tokens}: a chunk carries at least one token"
            )
        return None

    def describe(self) -> str:
        """The answer in one line, for failure messages."""
        thought = f"reasoning {len(self.reasoning)} chars, " if self.reasoning else ""
        return (
            f"{thought}content {self.content[:160]!r} (finish_reason {self.finish_reason!r}, "
            f"{self.completion_tokens} tokens)"
        )


class Refused(Exception):
    """The server refused a request with a 4xx and a message (e.g. a sampling parameter
    an engine does not support in this configuration)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class Asker:
    """Asks one backend questions the way its profile's model kind needs."""

    def __init__(self, client: SimpleClient, spec: CorrectnessSpec) -> None:
        self.client = client
        self.spec = spec
        self.kind = model_kind(spec)
        self.api: Literal["completions", "chat"] = (
            "chat" if spec.prompt_style == "chat" else "completions"
        )

    def budget(self, answer_tokens: int) -> int:
        """max_tokens for an answer of ``answer_tokens``: a reasoning model gets its
        thinking budget on top."""
        if self.kind == "reasoning":
            return answer_tokens + self.spec.reasoning_budget
        return answer_tokens

    def _params(self, answer_tokens: int, stop: list[str] | None, **params: Any) -> dict[str, Any]:
        out = {"max_tokens": self.budget(answer_tokens), **params}
        if stop and self.kind != "reasoning":  # a stop string would end the thinking
            out["stop"] = stop
        return out

    def ask(
        self, prompt: str, *, answer_tokens: int, stop: list[str] | None = None, **params: Any
    ) -> Answer:
        """A non-streamed answer. Raises :class:`Refused` on a 4xx."""
        try:
            body = self.client.complete(
                prompt, api=self.api, **self._params(answer_tokens, stop, **params)
            )
        except httpx.HTTPStatusError as exc:
            if 400 <= exc.response.status_code < 500:
                raise Refused(exc.response.status_code, _error_message(exc.response)) from exc
            raise
        choice = body["choices"][0]
        usage = body.get("usage") or {}
        calls = None
        if self.api == "chat":
            message = choice.get("message") or {}
            content, reasoning = message.get("content") or "", message_reasoning(message)
            calls = message_tool_calls(message)
        else:
            content, reasoning = choice.get("text") or "", ""
        details = usage.get("completion_tokens_details") or {}
        return Answer(
            content=content,
            reasoning=reasoning,
            finish_reason=choice.get("finish_reason"),
            completion_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
            # a count only: vLLM 0.32 says 0 beside the reasoning it returned
            reasoning_tokens=details.get("reasoning_tokens") or None,
            tool_calls=calls,
        )

    def stream(
        self, prompt: str, *, answer_tokens: int, stop: list[str] | None = None, **params: Any
    ) -> Answer:
        """A streamed answer (usage included); a failed request sets ``error``."""
        record = self.client.stream(
            prompt, api=self.api, **self._params(answer_tokens, stop, **params)
        )
        return Answer(
            content=record.text,
            reasoning=record.reasoning,
            finish_reason=record.finish_reason,
            completion_tokens=record.completion_tokens,
            prompt_tokens=record.prompt_tokens,
            chunks=len(record.token_times),
            error=record.error,
            reasoning_tokens=record.thinking_tokens if record.reasoning else None,
            tool_calls=record.tool_calls,
        )

    def answer_or_error(
        self, prompt: str, *, stream: bool, answer_tokens: int, **params: Any
    ) -> tuple[Answer | None, str | None]:
        """The answer, streamed or not, and why the server gave none (a 4xx refusal, an
        error status with its message, a failed stream), for checks that fail on either.
        (llama.cpp answers some invalid requests with 500: `tools param requires --jinja
        flag`.)"""
        try:
            if stream:
                answer = self.stream(prompt, answer_tokens=answer_tokens, **params)
            else:
                answer = self.ask(prompt, answer_tokens=answer_tokens, **params)
        except Refused as exc:
            return None, str(exc)
        except httpx.HTTPStatusError as exc:
            return None, f"HTTP {exc.response.status_code}: {_error_message(exc.response)}"
        return answer, answer.error

    def natural_end_problems(self, answer: Answer, answer_tokens: int) -> list[str]:
        """What contradicts a natural end of sequence: finish_reason 'stop' with fewer
        tokens than the budget, an answer, and nothing of an end marker in the text."""
        problems = []
        budget = self.budget(answer_tokens)
        if answer.finish_reason != "stop":
            problems.append(f"finish_reason {answer.finish_reason!r}, expected 'stop'")
        tokens = answer.completion_tokens
        if tokens is None or not 0 < tokens < budget:
            problems.append(f"{tokens} completion tokens, expected 1..{budget - 1}")
        if not answer.content.strip():
            problems.append("empty content")
        if leaked := leaked_markers(answer.content):
            problems.append(f"end-of-sequence markers leaked into the text: {leaked}")
        return problems


def message_tool_calls(message: dict[str, Any]) -> list[dict[str, str]] | None:
    """A non-streamed message's tool calls as the stream's (id, name, arguments text)."""
    calls = [
        {
            "id": call.get("id") or "",
            "name": (call.get("function") or {}).get("name") or "",
            "arguments": (call.get("function") or {}).get("arguments") or "",
        }
        for call in message.get("tool_calls") or ()
        if isinstance(call, dict)
    ]
    return calls or None


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except ValueError:
        return response.text[:300]
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    return str(error or response.text)[:300]
