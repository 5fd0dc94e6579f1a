"""The prompts one run sends: seeded per level and run, exact where the server counts tokens.

A session owns one ``PromptSource``. Its prompt kind keeps what it counted or read (prompt
words' token costs, the dataset) between levels, and it learns once whether chat prompts
can be counted.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from perfgate.engines import Engine
from perfgate.gate.values import level_name
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.profile import Profile
from perfgate.render.live import ProgressView
from perfgate.workload.kinds import Draw, PromptKind, prompt_kind
from perfgate.workload.prompts import (
    Prompt,
    Tokenizer,
)


class PromptSource:
    """Builds each level's prompts against the running server (its tokenizer counts them),
    through the profile's prompt kind (:mod:`perfgate.workload.kinds`)."""

    def __init__(
        self,
        profile: Profile,
        engine: Engine,
        *,
        root: Path,
        view: ProgressView,
        degraded: Callable[[str], None],
        nonce: str = "",
        clients: HttpClients = NETWORK,
    ) -> None:
        self.clients = clients  # how the server's tokenizer is reached
        self.profile = profile
        self.engine = engine
        self.root = root  # a dataset path is relative to it
        self.view = view
        self.degraded = degraded  # says once what perfgate could not do as usual
        self.nonce = nonce  # attached servers may cache prompts: a per-run nonce differs
        self._chat_countable: bool | None = None  # whether chat prompts can be counted
        self._cache: dict[str, Any] = {}  # what the prompt kind keeps between draws

    @property
    def kind(self) -> PromptKind:
        """The profile's prompt kind (``workload.prompts``)."""
        return prompt_kind(self.profile.workload.prompts)

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
        with self.clients.client(base_url, timeout=30.0, headers=headers) as client:
            return self.kind.draw(
                Draw(
                    client=client,
                    engine=self.engine,
                    workload=w,
                    model=self.profile.model.name,
                    root=self.root,
                    run=f"{name} {level_name(concurrency)} run {repeat + 1}",
                    count=count,
                    seed=seed,
                    why=self._inexact_reason(client),
                    step=self.view.step,
                    degraded=self.degraded,
                    cache=self._cache,
                )
            )

    def _inexact_reason(self, client: httpx.Client) -> str:
        """Why prompts of exactly input_len tokens cannot be built here ('' when they can)."""
        if self.engine.tokenize_path is None:
            return "no tokenize endpoint"
        if self.profile.workload.api != "chat":
            return ""
        if self._chat_countable is None:
            tokenizer = Tokenizer(client, self.engine, self.profile.model.name, "chat")
            self._chat_countable = tokenizer.counts_chat()
        if self._chat_countable:
            return ""
        return f"{self.engine.name} cannot count chat prompts after the chat template"
