"""Seeded random prompts of an exact token length, measured by the server's tokenizer.

Prompts are random words drawn from a seeded generator, so no two requests of a run
share a prefix (a prefix cache does not flatter the numbers) and every run with the
same seed sends the same prompts. Their length is counted by the server's own
tokenize endpoint, special tokens (and the chat template) included, so it matches
``usage.prompt_tokens``. Output length is forced with ``ignore_eos``.

A shared-prefix workload (``prefix_len``) starts every prompt of a level run with the
same seeded words, ``prefix_len`` tokens of them (as a long common system prompt would),
and ends each with distinct ones, to ``input_len`` tokens in all: a server's prefix
cache serves the common part.

Building is cheap: the tokens each word costs are counted once (:func:`word_costs`),
each prompt is planned from those costs, and every plan is checked with one count,
several at a time. Only a plan the server counts differently falls back to a search
by counting (:func:`exact_prompt`)."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import httpx

from perfgate.engines import Engine
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


PLAN_WORDS = WORDS[:96]  # the words plans are made of (their costs are counted once)


COUNT_WORKERS = 8  # tokenize requests in flight while building


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt and its length in tokens (None where the server cannot count), and the
    output tokens its request asks for (None: the profile's ``output_len``)."""

    text: str
    tokens: int | None
    output_len: int | None = None
    history: tuple[tuple[str, str], ...] = ()  # earlier (user, reply) turns it resends


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
        self._lock = threading.Lock()

    def counts_chat(self) -> bool:
        """Whether this engine can count a chat prompt after its template."""
        try:
            return self.engine.chat_tokenize_body(self.client, "hello", self.model) is not None
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def count(self, text: str) -> int:
        """Tokens of ``text`` sent as a prompt of the measured API, as the server counts
        them (special tokens and chat template included). Thread-safe."""
        with self._lock:
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


def random_words(rng: random.Random, count: int) -> list[str]:
    """``count`` words drawn at random from the word list."""
    return [rng.choice(WORDS) for _ in range(count)]


def joined(prefix: str, words: Sequence[str]) -> str:
    """``prefix`` then ``words``, separated by spaces (no leading space without a prefix)."""
    return " ".join([prefix, *words]) if prefix else " ".join(words)


def exact_prompt(
    tokenizer: Counter, rng: random.Random, input_len: int, prefix: str = ""
) -> Prompt:
    """A random prompt of exactly ``input_len`` tokens (starting with ``prefix``, when
    given), searched for by counting (several sequential counts: the fallback for a plan
    that missed)."""
    base = tokenizer.count(prefix) if prefix else 0
    target = max(1, input_len - base)  # tokens the words add
    words = random_words(rng, max(8, target * 2))
    full = tokenizer.count(joined(prefix, words)) - base
    # Tokens grow monotonically with words: estimate, then walk to the largest fit.
    n = max(1, min(len(words), round(target * len(words) / max(full, 1))))
    count = tokenizer.count(joined(prefix, words[:n]))
    steps = 0
    while count > input_len and n > 1 and steps < MAX_ADJUST_STEPS:
        n -= 1
        count = tokenizer.count(joined(prefix, words[:n]))
        steps += 1
    while n < len(words) and steps < MAX_ADJUST_STEPS:
        more = tokenizer.count(joined(prefix, words[: n + 1]))
        steps += 1
        if more > input_len:
            break
        n, count = n + 1, more
    text = joined(prefix, words[:n])
    if count > input_len:  # even one random word is too long: start from pad words alone
        text, count = prefix, tokenizer.count(prefix)
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


class Counter(Protocol):
    """Anything that counts a prompt's tokens as the measured API does."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class WordCosts:
    """Tokens each plan word costs: ``first``, as a whole prompt by itself (specials and
    template included); ``more``, appended after another word."""

    first: dict[str, int]
    more: dict[str, int]


Counted = Callable[[int], None]  # progress: how many counts are done


def _parallel(
    count: Callable[[str], int],
    texts: Sequence[str],
    workers: int,
    on_counted: Counted | None = None,
) -> list[int]:
    out: list[int] = []
    with contextlib.ExitStack() as stack:
        if workers <= 1 or len(texts) <= 1:
            results: Iterable[int] = map(count, texts)
        else:
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=workers))
            results = pool.map(count, texts)
        for n in results:
            out.append(n)
            if on_counted is not None:
                on_counted(len(out))
    return out


def word_cost_counts() -> int:
    """How many counts :func:`word_costs` makes."""
    return 2 * len(PLAN_WORDS) + 1


def word_costs(
    tokenizer: Counter, workers: int = COUNT_WORKERS, on_counted: Counted | None = None
) -> WordCosts:
    """Count each plan word's cost once: ``2 * len(PLAN_WORDS) + 1`` counts, in parallel."""
    texts = ["the", *PLAN_WORDS, *(f"the {w}" for w in PLAN_WORDS)]
    counts = _parallel(tokenizer.count, texts, workers, on_counted)
    base, n = counts[0], len(PLAN_WORDS)
    first = dict(zip(PLAN_WORDS, counts[1 : n + 1], strict=True))
    more = {w: c - base for w, c in zip(PLAN_WORDS, counts[n + 1 :], strict=True)}
    return WordCosts(first, more)


def _planned_words(
    costs: WordCosts, rng: random.Random, words: list[str], total: int, n: int
) -> list[str]:
    """Append random plan words to ``words`` (costing ``total`` so far) up to ``n``."""
    singles = [w for w in PLAN_WORDS if costs.more[w] == 1]
    usable = [w for w in PLAN_WORDS if costs.more[w] >= 1]
    while total < n:
        word = rng.choice(usable)
        if total + costs.more[word] > n:
            word = rng.choice(singles)
        words.append(word)
        total += costs.more[word]
    return words


def planned_prompt(
    costs: WordCosts, rng: random.Random, input_len: int, prefix: tuple[str, int] | None = None
) -> str | None:
    """Random plan words whose costs add up to exactly ``input_len`` (None: impossible
    with these words); after ``prefix`` (its text and its tokens), when given."""
    if not any(costs.more[w] == 1 for w in PLAN_WORDS):
        return None
    if prefix is not None:
        text, tokens = prefix
        if tokens >= input_len:
            return None
        return joined(text, _planned_words(costs, rng, [], tokens, input_len))
    starts = [w for w in PLAN_WORDS if costs.first[w] <= input_len]
    if not starts:
        return None
    first = rng.choice(starts)
    return " ".join(_planned_words(costs, rng, [first], costs.first[first], input_len))


def shared_prefix(
    tokenizer: Counter, costs: WordCosts, prefix_len: int, seed: int
) -> tuple[str, int]:
    """The common start of a shared-prefix level run's prompts: seeded words of exactly
    ``prefix_len`` tokens, as the measured API counts them alone."""
    rng = random.Random(f"{seed}:prefix")
    plan = planned_prompt(costs, rng, prefix_len)
    if plan is not None and tokenizer.count(plan) == prefix_len:
        return plan, prefix_len
    return exact_prompt(tokenizer, rng, prefix_len).text, prefix_len


def build_prompts(
    tokenizer: Counter,
    count: int,
    input_len: int | Sequence[int],
    seed: int,
    costs: WordCosts | None = None,
    workers: int = COUNT_WORKERS,
    on_counted: Counted | None = None,
    prefix_len: int | None = None,
) -> list[Prompt]:
    """``count`` distinct seeded prompts of exactly ``input_len`` tokens: planned from
    ``costs`` (counted here when not given), each checked with one count (``workers``
    at a time; ``on_counted`` hears how many are checked); a plan the server counts
    differently is searched for by counting. With ``prefix_len``, all start with the
    same :func:`shared_prefix` of that many tokens. ``input_len`` may give each prompt
    its own length."""
    costs = costs or word_costs(tokenizer, workers)
    rng = random.Random(seed)
    lengths = [input_len] * count if isinstance(input_len, int) else list(input_len)
    prefix = shared_prefix(tokenizer, costs, prefix_len, seed) if prefix_len else None
    plans = [planned_prompt(costs, rng, n, prefix) for n in lengths]
    checked = _parallel(tokenizer.count, [p for p in plans if p is not None], workers, on_counted)
    counted = iter(checked)
    prompts = []
    for i, (plan, n) in enumerate(zip(plans, lengths, strict=True)):
        if plan is not None and next(counted) == n:
            prompts.append(Prompt(text=plan, tokens=n))
        else:
            rng_i = random.Random(f"{seed}:{i}")
            prompts.append(exact_prompt(tokenizer, rng_i, n, prefix[0] if prefix else ""))
    return prompts
