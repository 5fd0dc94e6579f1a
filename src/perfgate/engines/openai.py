"""A generic OpenAI-compatible endpoint, for attach mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from perfgate.engines.base import Engine


@dataclass(frozen=True)
class OpenAICompatible(Engine):
    """Only the OpenAI API is assumed: no tokenize endpoint, no health path; whether it
    takes ``ignore_eos`` is probed before measuring (perfgate says what it degraded)."""

    name: str = "openai"
    health_path: str | None = None
    tokenize_path: str | None = None
    features_known: bool = False
    title: ClassVar[str | None] = "server"  # any server: the description names none


ENGINE = OpenAICompatible()  # found by perfgate.engines: an engine is this one file
