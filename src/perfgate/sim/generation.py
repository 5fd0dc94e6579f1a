"""Generation requests: validate an OpenAI completions or chat body, count its prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfgate.sim.config import Fault, SimConfigError
from perfgate.sim.payloads import Api


class BadRequest(Exception):
    """A request the simulator refuses with 400 and an OpenAI-style error."""


@dataclass(slots=True)
class Generation:
    """A validated completions or chat request."""

    api: Api
    stream: bool
    include_usage: bool
    max_tokens: int
    prompt_tokens: int
    tag: str | None
    fault: Fault | None


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _prompt_tokens(api: Api, body: dict[str, Any]) -> int:
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        return sum(len(text_of(m.get("content")).split()) for m in messages if isinstance(m, dict))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)  # token ids
    raise BadRequest("prompt must be one string or one list of token ids")


def parse_generation(
    api: Api, body: dict[str, Any], headers: dict[str, str], default_max_tokens: int
) -> Generation:
    """Validate a generation request body; raises :class:`BadRequest`."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None and api == "chat":
        max_tokens = body.get("max_completion_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise BadRequest(f"max_tokens must be an integer >= 1 (got {max_tokens!r})")
    if body.get("n", 1) != 1:
        raise BadRequest("the simulator generates one choice per request (n must be 1)")
    stream_options = body.get("stream_options") or {}
    fault = None
    if body.get("sim_fault") is not None:
        try:
            fault = Fault.from_dict(body["sim_fault"])
        except (SimConfigError, TypeError) as exc:
            raise BadRequest(f"invalid sim_fault: {exc}") from exc
    tag = body.get("sim_tag", headers.get("x-sim-tag"))
    return Generation(
        api=api,
        stream=bool(body.get("stream")),
        include_usage=isinstance(stream_options, dict)
        and bool(stream_options.get("include_usage")),
        max_tokens=max_tokens or default_max_tokens,
        prompt_tokens=_prompt_tokens(api, body),
        tag=None if tag is None else str(tag),
        fault=fault,
    )
