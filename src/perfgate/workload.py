"""Seeded random prompts of an exact token length, measured by the server's tokenizer.

Prompts are random words drawn from a seeded generator, so no two requests of a run
share a prefix (a prefix cache does not flatter the numbers) and every run with the
same seed sends the same prompts. Their length is counted by the server's own
tokenize endpoint, special tokens included, so it matches ``usage.prompt_tokens``
for the completions API. Output length is forced with ``ignore_eos``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

from perfgate.engines import Engine
from perfgate.engines.base import chat_messages
from perfgate.errors import WorkloadError

# Common English words; nearly all are one token in every mainstream tokenizer.
WORDS = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city name "
    "team minute idea kid body back parent face others level office door health person "
    "art war history party result change morning reason research girl guy moment air "
    "teacher force education foot boy age policy music market sense nation plan college "
    "interest death experience effect class control care field development role effort "
    "rate heart drug show leader light voice wife police mind price report decision son "
    "view relationship town road arm difference value building action model season "
    "society tax director position player record paper space ground form event matter "
    "center couple site project activity star table need court American oil situation "
    "cost industry figure street image phone data picture practice piece land product "
    "doctor wall patient worker news test movie north love support technology step "
    "baby computer type attention film tree source organization hair window evidence"
).split()
PAD_WORDS = (" the", " a", " and", " of", " to", " in")
MAX_ADJUST_STEPS = 64


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt and its length in tokens (None where the server cannot count)."""

    text: str
    tokens: int | None


class Tokenizer:
    """Counts tokens through the server's tokenize endpoint (one pooled sync client), the
    way the measured API counts them: a chat prompt with the chat template applied."""

    def __init__(
        self, client: httpx.Client, engine: Engine, model: str, api: str = "completions"
    ) -> None:
        if engine.tokenize_path is None:
            raise WorkloadError(
                f"engine {engine.name!r} has no tokenize endpoint; exact input lengths are "
                "not possible (use an engine profile such as llamacpp or vllm)"
            )
        self.client = client
        self.engine = engine
        self.model = model
        self.api = api
        self.calls = 0

    def counts_chat(self) -> bool:
        """Whether this engine can count a chat prompt after its template."""
        try:
            return self.engine.chat_tokenize_body(self.client, "hello", self.model) is not None
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def count(self, text: str) -> int:
        """Tokens of ``text`` sent as a prompt of the measured API, as the server counts
        them (special tokens and chat template included)."""
        self.calls += 1
        path = self.engine.tokenize_path
        assert path is not None
        try:
            body = (
                self.engine.chat_tokenize_body(self.client, text, self.model)
                if self.api == "chat"
                else self.engine.tokenize_body(text, self.model)
            )
            if body is None:
                raise WorkloadError(
                    f"engine {self.engine.name!r} cannot count chat prompts after the template"
                )
            response = self.client.post(path, json=body)
            response.raise_for_status()
            return len(self.engine.parse_tokens(response.json()))
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise WorkloadError(f"tokenize request to {path} failed: {exc}") from exc


def _random_words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(count)]


def exact_prompt(tokenizer: Tokenizer, rng: random.Random, input_len: int) -> Prompt:
    """A random prompt of exactly ``input_len`` tokens."""
    words = _random_words(rng, max(8, input_len * 2))
    full = tokenizer.count(" ".join(words))
    # Tokens grow monotonically with words: estimate, then walk to the largest fit.
    n = max(1, min(len(words), round(input_len * len(words) / max(full, 1))))
    count = tokenizer.count(" ".join(words[:n]))
    steps = 0
    while count > input_len and n > 1 and steps < MAX_ADJUST_STEPS:
        n -= 1
        count = tokenizer.count(" ".join(words[:n]))
        steps += 1
    while n < len(words) and steps < MAX_ADJUST_STEPS:
        more = tokenizer.count(" ".join(words[: n + 1]))
        steps += 1
        if more > input_len:
            break
        n, count = n + 1, more
    text = " ".join(words[:n])
    if count > input_len:  # even one random word is too long: start from pad words alone
        text, count = "", tokenizer.count("")
    for pad in PAD_WORDS * 4:  # close a gap with one-token words
        if count == input_len or steps >= MAX_ADJUST_STEPS:
            break
        candidate = text + pad if text else pad.strip()
        padded = tokenizer.count(candidate)
        steps += 1
        if padded <= input_len:
            text, count = candidate, padded
    if count != input_len or not text:
        raise WorkloadError(
            f"could not build a prompt of exactly {input_len} tokens (closest: {count}); "
            "the smallest possible prompt may already be longer (special tokens)"
        )
    return Prompt(text=text, tokens=count)


def build_prompts(tokenizer: Tokenizer, count: int, input_len: int, seed: int) -> list[Prompt]:
    """``count`` distinct seeded prompts of exactly ``input_len`` tokens."""
    rng = random.Random(seed)
    return [exact_prompt(tokenizer, rng, input_len) for _ in range(count)]


CALIBRATION_WORDS = 256


def _prompt_tokens(client: httpx.Client, api: str, model: str, text: str) -> int:
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
) -> tuple[list[Prompt], str]:
    """For a server that cannot count prompts: seeded prompts whose length is estimated
    from two readings of ``usage.prompt_tokens`` through the measured API (a one-word
    prompt gives the fixed overhead, chat template included; a long one the tokens per
    word). Returns the prompts (``tokens`` None: not exact) and a note saying how far off."""
    rng = random.Random(seed)
    sample = _random_words(rng, CALIBRATION_WORDS)
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
    prompts = [Prompt(" ".join(_random_words(rng, words)), None) for _ in range(count)]
    note = (
        f"{why}: {api} prompts of {words} words, about {input_len} tokens ({overhead} "
        f"tokens of template and specials, {per_word:.2f} tokens per word, from two "
        "usage.prompt_tokens readings); input lengths are approximate"
    )
    return prompts, note
