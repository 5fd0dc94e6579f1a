"""Correctness judgements: degenerate-text detectors, known answers, code extraction.

Every detector is a pure function of the text returning a number; ``degeneracy``
compares the numbers with a profile's limits. Extracted code runs in
:mod:`perfgate.correctness.sandbox`.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from dataclasses import dataclass

from perfgate.profile import DegeneracyLimits

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Finding:
    """One detector's measurement of one text."""

    detector: str
    value: float
    limit: float
    ok: bool

    def __str__(self) -> str:
        state = "ok" if self.ok else "DEGENERATE"
        return f"{self.detector}={self.value:.3g} (limit {self.limit:.3g}) {state}"


def loop_fraction(text: str, min_repeats: int = 3, window: int = 2000) -> float:
    """Share of the text (characters) inside a pattern repeating at least ``min_repeats``
    times at its end. Character-based, so loops without spaces count too."""
    tail = text[-window:]
    n = len(tail)
    best = 0
    for period in range(1, n // min_repeats + 1):
        i = n - 1 - period
        while i >= 0 and tail[i] == tail[i + period]:
            i -= 1
        covered = n - 1 - i
        if covered >= min_repeats * period:
            best = max(best, covered)
    return best / n if n else 0.0


def distinct_ngram_ratio(text: str, n: int = 3) -> float:
    """Distinct word n-grams over all word n-grams (1.0 for texts shorter than n words)."""
    words = _WORD.findall(text)
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def compression_ratio(text: str) -> float:
    """Raw bytes over zlib-compressed bytes."""
    raw = text.encode()
    return len(raw) / len(zlib.compress(raw, 9)) if raw else 1.0


_SPECIAL_TOKEN = re.compile(r"<\|[^<>|]{1,40}\|>|<[a-z]+(?:_[a-z]+)+>")


def garbage_fraction(text: str) -> float:
    """Share of characters that no sane answer contains: controls, U+FFFD, unassigned, and
    leaked special tokens such as ``<start_of_image>`` or ``<|im_end|>``."""
    if not text:
        return 0.0
    total = len(text)
    bad = sum(len(m) for m in _SPECIAL_TOKEN.findall(text))
    text = _SPECIAL_TOKEN.sub("", text)
    for ch in text:
        if ch in "\n\t\r":
            continue
        category = unicodedata.category(ch)
        if ch == "\ufffd" or category in ("Cc", "Cn", "Co", "Cs"):
            bad += 1
    return bad / total


def degeneracy(text: str, limits: DegeneracyLimits) -> list[Finding]:
    """Every detector's finding for one text."""
    findings = [
        Finding(
            "chars", len(text.strip()), limits.min_chars, len(text.strip()) >= limits.min_chars
        ),
        Finding(
            "garbage_fraction",
            g := garbage_fraction(text),
            limits.max_garbage_fraction,
            g <= limits.max_garbage_fraction,
        ),
    ]
    if len(_WORD.findall(text)) >= limits.min_words:
        loop, distinct, ratio = (
            loop_fraction(text),
            distinct_ngram_ratio(text),
            compression_ratio(text),
        )
        findings += [
            Finding(
                "loop_fraction", loop, limits.max_loop_fraction, loop <= limits.max_loop_fraction
            ),
            Finding(
                "distinct_3grams",
                distinct,
                limits.min_distinct_3grams,
                distinct >= limits.min_distinct_3grams,
            ),
            Finding(
                "compression_ratio",
                ratio,
                limits.max_compression_ratio,
                ratio <= limits.max_compression_ratio,
            ),
        ]
    return findings


def is_degenerate(text: str, limits: DegeneracyLimits) -> list[Finding]:
    """The failing findings (empty when the text looks like normal output)."""
    return [f for f in degeneracy(text, limits) if not f.ok]


# End-of-sequence and turn markers of common chat templates; ``<|...|>`` forms of any name
# are caught by _SPECIAL_TOKEN as well.
END_MARKERS = (
    "<eos>",
    "</s>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<start_of_turn>",
    "<|im_start|>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
)


def leaked_markers(text: str) -> list[str]:
    """End-of-sequence, turn and other special-token markers that appear in a text (an
    engine that prints them did not stop, or did not strip, where it should)."""
    found = [m for m in END_MARKERS if m in text]
    found += [m for m in _SPECIAL_TOKEN.findall(text) if m not in found]
    return found


def contains_answer(text: str, answers: list[str]) -> bool:
    """Whether any accepted answer appears as a word or phrase (case-insensitive)."""
    lowered = text.lower()
    return any(re.search(rf"(?<!\w){re.escape(a.lower())}(?!\w)", lowered) for a in answers)


# --- code extraction and the sandbox ---------------------------------------------------

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str, prefix: str = "") -> str:
    """The Python code in an answer: the first fenced block, else ``prefix + text`` up to
    the end of the first top-level block (a base model's completion of a ``def`` goes on
    with more functions, the last one cut off by max_tokens)."""
    fenced = _FENCE.search(text)
    if fenced:
        return fenced.group(1)
    kept: list[str] = []
    for line in (prefix + text).splitlines():
        if kept and line.strip() and not line[0].isspace():
            break
        kept.append(line)
    return "\n".join(kept).rstrip() + "\n"


REASONING_FIELDS = ("reasoning", "reasoning_content")


def message_reasoning(message: dict[str, object]) -> str:
    """Reasoning text of a non-streamed chat message, in whichever field the engine uses."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def reasoning_problems(reasoning: str, content: str) -> list[str]:
    """What is wrong with a reasoning model's answer (empty list when fine)."""
    problems = []
    if not reasoning.strip():
        problems.append("no reasoning text (checked fields: reasoning, reasoning_content)")
    if not content.strip():
        problems.append("no content after the reasoning")
    if reasoning.strip() and reasoning.strip() == content.strip():
        problems.append("reasoning and content are the same text (parser not separating)")
    if "</think>" in content or "<think>" in content:
        problems.append("think tags leaked into the content (reasoning parser off?)")
    if "</think>" in reasoning or "<think>" in reasoning:
        problems.append("think tags left in the reasoning field (the parser passed them on)")
    return problems


def thinking_share(reasoning_tokens: int | None, budget: int) -> str:
    """How much of the reasoning budget an answer spent thinking, for people."""
    if reasoning_tokens is None:
        return "the server did not say how many tokens were reasoning"
    return (
        f"{reasoning_tokens} tokens of thinking, {reasoning_tokens / budget:.0%} of the "
        f"{budget}-token reasoning budget (correctness.reasoning_budget)"
    )
