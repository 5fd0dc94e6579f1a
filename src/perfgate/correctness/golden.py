"""Golden greedy outputs: recorded with a baseline, compared on later runs, near-ties told
apart from real changes.

Greedy decoding is deterministic for one engine, one batch shape and one set of kernels.
Batched or speculative verification changes the numerics slightly, and where the two best
tokens are almost equally likely (a near-tie) the other one can win. At the first
character where an output parts from its reference, the output's own token log-probs
say whether that is such a flip: the reference's continuation is one of the top
alternatives, within ``tie_margin`` nats of the token chosen. Anything else is a change.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfgate.client import SimpleClient
from perfgate.errors import BaselineError
from perfgate.files import write_json_atomic
from perfgate.gate.baseline import field_errors

Outcome = Literal["exact", "tie", "changed"]


class TokenChoice(BaseModel):
    """One generated token, its log-prob and the top alternatives the engine reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: str
    logprob: float
    alternatives: dict[str, float] = Field(
        default_factory=dict, description="Top tokens' text → log-prob (may hold the chosen)."
    )


class GoldenOutputs(BaseModel):
    """Greedy outputs for a fixed prompt set, recorded with a baseline."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = Field(description="Version of this file's schema.")
    max_tokens: int = Field(gt=0, description="Output length the outputs were generated with.")
    outputs: dict[str, str] = Field(description="Greedy output text by prompt.")
    tokens: dict[str, list[TokenChoice] | None] = Field(
        default_factory=dict,
        description="Each output's token log-probs where the engine gave them: a later "
        "divergence at a near-tie is told apart from a change.",
    )


def parse_logprobs(choice: dict[str, Any]) -> list[TokenChoice] | None:
    """Token log-probs of a completion choice, in either format engines use: the legacy
    completions one (``tokens`` / ``token_logprobs`` / ``top_logprobs``, vLLM) or the
    chat one (``content: [{token, logprob, top_logprobs}]``, llama.cpp). None when absent
    or malformed. A token without alternatives carries no information (speculative
    llama.cpp reports accepted draft tokens as log-prob 0 with no alternatives)."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    try:
        if isinstance(logprobs.get("content"), list):
            return [
                TokenChoice(
                    text=str(item["token"]),
                    logprob=float(item["logprob"]),
                    alternatives={
                        str(alt["token"]): float(alt["logprob"])
                        for alt in item.get("top_logprobs") or ()
                    },
                )
                for item in logprobs["content"]
            ]
        tops = logprobs.get("top_logprobs") or [None] * len(logprobs["tokens"])
        return [
            TokenChoice(
                text=str(token),
                logprob=float(lp),
                alternatives={str(k): float(v) for k, v in (top or {}).items()},
            )
            for token, lp, top in zip(
                logprobs["tokens"], logprobs["token_logprobs"], tops, strict=True
            )
        ]
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class GoldenDiff:
    """How one output compares with its reference output."""

    prompt: str
    outcome: Outcome
    first_divergence: int | None  # character index, None when exact
    expected: str
    actual: str
    why: str = ""  # for a tie: the two tokens and their gap; for a change: why not a tie

    @property
    def exact(self) -> bool:
        return self.outcome == "exact"

    def message(self) -> str:
        """Where the texts part, with a little context, and whether it was a near-tie."""
        if self.first_divergence is None:
            return f"{self.prompt[:40]!r}: identical"
        at = self.first_divergence
        kind = "near-tie flip" if self.outcome == "tie" else "differs"
        return (
            f"{self.prompt[:40]!r}: {kind} at character {at}: expected "
            f"{self.expected[max(0, at - 10) : at + 30]!r}, got "
            f"{self.actual[max(0, at - 10) : at + 30]!r}" + (f" ({self.why})" if self.why else "")
        )


def first_divergence(expected: str, actual: str) -> int | None:
    """Index of the first differing character (None when equal)."""
    if expected == actual:
        return None
    for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return i
    return min(len(expected), len(actual))


def near_tie(
    other: str, chosen: str, tokens: list[TokenChoice] | None, at: int, margin: float
) -> tuple[bool, str]:
    """Whether, at character ``at`` where ``chosen`` parts from ``other``, the tokens that
    produced ``chosen`` had ``other``'s continuation among their top alternatives within
    ``margin`` nats: a near-tie flip. Returns the answer and why.

    Where the texts part exactly at a token boundary, the fork may be the token before it:
    ``' a'`` then ``' healthy'`` against ``' anyone'`` agree on ``' a'`` as text but
    forked at that token, so it is asked too."""
    if not tokens:
        return False, "no token log-probs"
    starts = list(itertools.accumulate((len(t.text) for t in tokens), initial=0))
    index = next((i for i in range(len(tokens)) if starts[i] <= at < starts[i + 1]), None)
    if index is None:
        return False, "the text ends where the other goes on"
    token, start, end = tokens[index], starts[index], starts[index + 1]
    if "".join(t.text for t in tokens)[:end] != chosen[:end]:
        return False, "token log-probs do not spell the text"
    tie, why = _token_tie(other, chosen, token, start, margin)
    if not tie and at == start and index > 0:
        tie_before, why_before = _token_tie(
            other, chosen, tokens[index - 1], starts[index - 1], margin
        )
        if tie_before:
            return True, why_before
    return tie, why


def _token_tie(
    other: str, chosen: str, token: TokenChoice, start: int, margin: float
) -> tuple[bool, str]:
    """Whether ``token`` (at character ``start`` of ``chosen``) had a rival that spells
    ``other``'s continuation from there within ``margin`` nats."""
    if not token.alternatives:
        return False, f"no alternatives reported for {token.text!r}"
    wanted = other[start:]
    rivals = {
        text: lp
        for text, lp in token.alternatives.items()
        if text and text != token.text and wanted.startswith(text)
    }
    if not rivals:
        return False, f"{wanted[:12]!r} is not among the top tokens after {chosen[:start][-12:]!r}"
    rival, rival_lp = max(rivals.items(), key=lambda kv: kv[1])
    gap = token.logprob - rival_lp
    detail = f"{token.text!r} {token.logprob:.3f} over {rival!r} {rival_lp:.3f}: {gap:.3f} nats"
    if gap <= margin:
        return True, detail
    return False, f"{detail} > tie margin {margin}"


def compare_outputs(
    prompt: str,
    expected: str,
    actual: str,
    actual_tokens: list[TokenChoice] | None = None,
    expected_tokens: list[TokenChoice] | None = None,
    margin: float = 0.0,
) -> GoldenDiff:
    """One output against its reference, a near-tie flip told apart from a change. Either
    side's log-probs can show the tie (a speculative engine may report none of its own)."""
    at = first_divergence(expected, actual)
    if at is None:
        return GoldenDiff(prompt, "exact", None, expected, actual)
    tie, why = near_tie(expected, actual, actual_tokens, at, margin)
    if not tie:
        tie_ref, why_ref = near_tie(actual, expected, expected_tokens, at, margin)
        tie, why = tie_ref, (why_ref if tie_ref else f"output: {why}; reference: {why_ref}")
    return GoldenDiff(prompt, "tie" if tie else "changed", at, expected, actual, why)


def compare_golden(
    golden: GoldenOutputs,
    actual: dict[str, str],
    tokens: dict[str, list[TokenChoice] | None] | None = None,
    margin: float = 0.0,
) -> list[GoldenDiff]:
    """Each golden prompt's output compared with the one produced now (``tokens``: the
    current outputs' log-probs; the golden file's own are used too)."""
    tokens = tokens or {}
    return [
        compare_outputs(
            prompt,
            expected,
            actual.get(prompt, ""),
            tokens.get(prompt),
            golden.tokens.get(prompt),
            margin,
        )
        for prompt, expected in golden.outputs.items()
    ]


TOP_LOGPROBS = 5


@dataclass(frozen=True, slots=True)
class Greedy:
    """Greedy outputs of a prompt set, with each output's token log-probs (None where the
    server gives none)."""

    outputs: dict[str, str]
    tokens: dict[str, list[TokenChoice] | None]


def greedy_outputs(
    client: SimpleClient, prompts: list[str], max_tokens: int, extras: dict[str, Any]
) -> Greedy:
    """Each prompt's greedy completion, computed afresh (``extras``: the engine's fields
    that disable cached-prefix reuse), with the top token log-probs where the server
    returns them; a server that refuses ``logprobs`` is asked again without."""
    outputs: dict[str, str] = {}
    tokens: dict[str, list[TokenChoice] | None] = {}
    want_logprobs = True
    for prompt in prompts:
        params = {"max_tokens": max_tokens, "temperature": 0, **extras}
        body = None
        if want_logprobs:
            try:
                body = client.complete(prompt, logprobs=TOP_LOGPROBS, **params)
            except httpx.HTTPStatusError as exc:
                if not 400 <= exc.response.status_code < 500:
                    raise
                want_logprobs = False
        if body is None:
            body = client.complete(prompt, **params)
        choice = body["choices"][0]
        outputs[prompt] = choice["text"]
        tokens[prompt] = parse_logprobs(choice)
    return Greedy(outputs, tokens)


def golden_path(baseline_file: Path) -> Path:
    """The golden outputs kept next to a baseline file."""
    return baseline_file.with_suffix(".golden.json")


def load_golden(path: Path) -> GoldenOutputs | None:
    """Read golden outputs; None when none were recorded."""
    if not path.exists():
        return None
    try:
        return GoldenOutputs.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise BaselineError(f"golden outputs {path} are invalid: {field_errors(exc)}") from exc


def save_golden(path: Path, golden: GoldenOutputs) -> None:
    """Write golden outputs atomically."""
    write_json_atomic(path, golden.model_dump_json(indent=2) + "\n")
