"""The prompts one run sends: seeded per level and run, exact where the server counts tokens.

A session owns one ``PromptSource``. It counts prompt words' token costs, reads the dataset
and learns whether chat prompts can be counted once, and reuses them for every level.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import httpx

from perfgate.engines import Engine
from perfgate.errors import WorkloadError
from perfgate.gate.values import level_name
from perfgate.profile import Profile
from perfgate.render.live import ProgressView
from perfgate.workload.approximate import approximate_prompts
from perfgate.workload.conversations import conversation_prompts, dataset_prompts, drawn_lengths
from perfgate.workload.dataset import Conversation, load_conversations
from perfgate.workload.prompts import (
    Prompt,
    Tokenizer,
    WordCosts,
    build_prompts,
    word_cost_counts,
    word_costs,
)


class PromptSource:
    """Builds each level's prompts against the running server (its tokenizer counts them)."""

    def __init__(
        self,
        profile: Profile,
        engine: Engine,
        *,
        root: Path,
        view: ProgressView,
        degraded: Callable[[str], None],
        nonce: str = "",
    ) -> None:
        self.profile = profile
        self.engine = engine
        self.root = root  # a dataset path is relative to it
        self.view = view
        self.degraded = degraded  # says once what perfgate could not do as usual
        self.nonce = nonce  # attached servers may cache prompts: a per-run nonce differs
        self._estimated_because: set[str] = set()  # why prompts were estimated, once said
        self._chat_countable: bool | None = None  # whether chat prompts can be counted
        self._conversations: list[Conversation] | None = None  # the dataset, once read
        self._dataset_counts: dict[str, tuple[int, int]] = {}  # its prompts' and replies' tokens
        self._word_costs: WordCosts | None = None  # prompt words' token costs, counted once

    def draw(
        self,
        base_url: str,
        name: str,
        concurrency: int | float,
        repeat: int,
        count: int,
        *,
        headers: dict[str, str] | None = None,
    ) -> list[Prompt]:
        """``count`` prompts for run ``repeat`` of test ``name``'s level ``concurrency``:
        the same for the same arguments (and nonce), different for any other. ``headers``:
        the server's API key and extra headers, for its tokenizer."""
        w = self.profile.workload
        key = f"{w.seed}:{name}:{concurrency}:{repeat}{self.nonce}"
        seed = random.Random(key).getrandbits(32)
        with httpx.Client(base_url=base_url, timeout=30.0, headers=headers) as client:
            why = self._inexact_reason(client)
            run = f"{name} {level_name(concurrency)} run {repeat + 1}"
            if w.prompts in ("dataset", "multi-turn"):
                return self._dataset_prompts(client, run, count, seed, why)
            prompts = self._word_prompts(client, run, count, seed, why)
            if not w.range_ratio:
                return prompts
            outputs = drawn_lengths(seed + 1, count, w.output_len, w.range_ratio)
            return [Prompt(p.text, p.tokens, n) for p, n in zip(prompts, outputs, strict=True)]

    def _tokenizer(self, client: httpx.Client, api: str) -> Tokenizer:
        return Tokenizer(client, self.engine, self.profile.model.name, api)

    def _word_prompts(
        self, client: httpx.Client, run: str, count: int, seed: int, why: str
    ) -> list[Prompt]:
        """Seeded random-word prompts (shared-prefix ones too): exact where the server can
        count them, else estimated."""
        w = self.profile.workload
        if why:
            prompts, note = approximate_prompts(
                client,
                self.profile.model.name,
                count,
                w.input_len,
                seed,
                w.api,
                why,
                prefix_len=w.prefix_len,
            )
            if why not in self._estimated_because:  # once: later estimates differ slightly
                self._estimated_because.add(why)
                self.degraded(note)
            return prompts
        tokenizer = self._tokenizer(client, w.api)
        if self._word_costs is None:
            total = word_cost_counts()
            with self.view.step("counting prompt words' tokens", total, unit="counts") as t:
                self._word_costs = word_costs(tokenizer, on_counted=t.update)
        floor = (w.prefix_len or 0) + 1
        with self.view.step(f"{run}: checking prompts", count, unit="prompts") as task:
            return build_prompts(
                tokenizer,
                count,
                drawn_lengths(seed, count, w.input_len, w.range_ratio, floor),
                seed,
                self._word_costs,
                on_counted=task.update,
                prefix_len=w.prefix_len,
            )

    def _dataset_prompts(
        self, client: httpx.Client, run: str, count: int, seed: int, why: str
    ) -> list[Prompt]:
        """Prompts drawn from the profile's dataset, with their replies' lengths."""
        w = self.profile.workload
        if why:
            raise WorkloadError(
                f"dataset prompts need the server's token counts, and here: {why}; use an "
                "engine with a tokenize endpoint (llamacpp, vllm), or random prompts"
            )
        assert w.dataset is not None
        if self._conversations is None:
            self._conversations = load_conversations(w.dataset, self.root)
        tokenizer = self._tokenizer(client, w.api)
        with self.view.step(f"{run}: counting dataset prompts", count, unit="prompts") as task:
            if w.prompts == "multi-turn":
                return conversation_prompts(
                    tokenizer,
                    self._conversations,
                    count,
                    seed,
                    max_output=w.output_len,
                    counted=self._dataset_counts,
                    on_counted=task.update,
                )
            return dataset_prompts(
                tokenizer,
                self._conversations,
                count,
                seed,
                max_input=w.input_len,
                max_output=w.output_len,
                counted=self._dataset_counts,
                on_counted=task.update,
            )

    def _inexact_reason(self, client: httpx.Client) -> str:
        """Why prompts of exactly input_len tokens cannot be built here ('' when they can)."""
        if self.engine.tokenize_path is None:
            return "no tokenize endpoint"
        if self.profile.workload.api != "chat":
            return ""
        if self._chat_countable is None:
            self._chat_countable = self._tokenizer(client, "chat").counts_chat()
        if self._chat_countable:
            return ""
        return f"{self.engine.name} cannot count chat prompts after the chat template"
