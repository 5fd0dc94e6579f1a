"""Prompt kinds, one module each behind :class:`PromptKind`: a new kind is one new file
here, plus its name among the profile's ``workload.prompts``.

A kind draws a level run's prompts from a :class:`Draw` (the server's client, the
workload, the run's seed and count, why prompts cannot be exact here, and a cache the kind
keeps between the draws of one run). :func:`prompt_kind` finds every module of this
package.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from perfgate.engines import Engine
from perfgate.errors import ProfileError
from perfgate.profile import WorkloadSpec
from perfgate.registry import Registry, UnknownName
from perfgate.workload.prompts import Prompt, Tokenizer


class Progress(Protocol):
    """One step's progress (``update`` as items finish)."""

    def update(self, done: int) -> None: ...


Step = Callable[..., AbstractContextManager[Progress]]  # step(label, total, unit=...)


@dataclass
class Draw:
    """What one level run asks of its prompt kind."""

    client: httpx.Client  # the server (its tokenizer counts the prompts)
    engine: Engine
    workload: WorkloadSpec
    model: str
    root: Path  # a dataset path is relative to it
    run: str  # the level run, in words: "sweep C=4 run 1"
    count: int
    seed: int
    why: str  # why prompts of exact lengths cannot be built here ('' when they can)
    step: Step  # a progress step: ``with step(label, total, unit="prompts") as task``
    degraded: Callable[[str], None]  # says once what perfgate could not do as usual
    cache: dict[str, Any] = field(default_factory=dict)  # kept between one run's draws

    def tokenizer(self, api: str | None = None) -> Tokenizer:
        """The server's token counter for the workload's API (or ``api``)."""
        return Tokenizer(self.client, self.engine, self.model, api or self.workload.api)


class PromptKind:
    """One kind of prompt: the names a profile gives it, and how a level run draws them."""

    names: tuple[str, ...] = ()

    def draw(self, draw: Draw) -> list[Prompt]:
        """``draw.count`` prompts for the level run: the same for the same seed."""
        raise NotImplementedError

    figures: tuple[str, ...] = ()  # figures judged whenever a profile's prompts are this kind
    # True: each answer ends on its own (a JSON object closes, a call ends), so no field
    # forces the output length (ignore_eos) and no answer is short
    ends_on_its_own: bool = False

    def request_fields(self, workload: WorkloadSpec) -> dict[str, Any]:
        """Fields every request of this kind sends besides its prompt (``tools``, a
        ``response_format``): what each answer is then judged against."""
        return {}

    def one_length(self, workload: WorkloadSpec) -> bool:
        """Whether every request asks for ``output_len`` tokens (else lengths vary by
        request, and no one length is there to check outputs against)."""
        return not workload.range_ratio

    def lengths(self, workload: WorkloadSpec) -> str:
        """The lengths in words, for progress lines: '128 in / 64 out tokens'."""
        spread = f" ±{workload.range_ratio:.0%}" if workload.range_ratio else ""
        shared = f", {workload.prefix_len} shared" if workload.prefix_len else ""
        return f"{workload.input_len}{spread} in{shared} / {workload.output_len}{spread} out tokens"


KINDS: Registry[PromptKind] = Registry("prompt kind", package=__name__)


def register(kind: PromptKind) -> PromptKind:
    """Add a kind under each of its names (a name taken twice is an error)."""
    for name in kind.names:
        KINDS.register(name, kind)
    return kind


def prompt_kind(name: str) -> PromptKind:
    """The kind a profile's ``workload.prompts`` names (every module here is looked at)."""
    if name not in KINDS:
        KINDS.discover()
    try:
        return KINDS[name]
    except UnknownName as exc:
        known = ", ".join(exc.known)
        raise ProfileError(f"no prompt kind {name!r} (there are: {known})") from None
