"""Prompts for a server that cannot count tokens: lengths calibrated from what it reports
in ``usage.prompt_tokens``."""

from __future__ import annotations

import random

import httpx

from perfgate.engines.chat import chat_messages
from perfgate.errors import WorkloadError
from perfgate.workload.prompts import Prompt, joined, random_words

CALIBRATION_WORDS = 256


def _prompt_tokens(client: httpx.Client, api: str, model: str, text: str) -> int:
    body: dict[str, object]
    if api == "chat":
        path, body = "/v1/chat/completions", {"messages": chat_messages(text)}
    else:
        path, body = "/v1/completions", {"prompt": text}
    response = client.post(path, json={"model": model, "max_tokens": 1, "temperature": 0, **body})
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"])


def approximate_prompts(
    client: httpx.Client,
    model: str,
    count: int,
    input_len: int,
    seed: int,
    api: str = "completions",
    why: str = "no tokenize endpoint",
    prefix_len: int | None = None,
) -> tuple[list[Prompt], str]:
    """For a server that cannot count prompts: seeded prompts whose length is estimated
    from two readings of ``usage.prompt_tokens`` through the measured API (a one-word
    prompt gives the fixed overhead, chat template included; a long one the tokens per
    word). Returns the prompts (``tokens`` None: not exact) and a note saying how far off."""
    rng = random.Random(seed)
    sample = random_words(rng, CALIBRATION_WORDS)
    try:
        overhead = _prompt_tokens(client, api, model, sample[0]) - 1
        measured = _prompt_tokens(client, api, model, " ".join(sample))
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise WorkloadError(
            f"{why}, and the server reports no usage.prompt_tokens ({exc}); prompt lengths "
            "cannot be set"
        ) from exc
    per_word = max(measured - overhead, 1) / CALIBRATION_WORDS
    words = max(1, round((input_len - overhead) / per_word))
    shared = min(words - 1, round(prefix_len / per_word)) if prefix_len else 0
    prefix = " ".join(random_words(random.Random(f"{seed}:prefix"), shared))
    prompts = [
        Prompt(joined(prefix, random_words(rng, words - shared)), None) for _ in range(count)
    ]
    common = f", the first {shared} shared" if shared else ""
    note = (
        f"{why}: {api} prompts of {words} words{common}, about {input_len} tokens ({overhead} "
        f"tokens of template and specials, {per_word:.2f} tokens per word, from two "
        "usage.prompt_tokens readings); input lengths are approximate"
    )
    return prompts, note
