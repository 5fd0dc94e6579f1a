"""The stored schema of a configuration fact: one value about a running server, with where
it was read. Engines read facts (``perfgate.engines.facts``); the run JSON, baselines and
diagnosis store and compare them.

A leaf module: it imports nothing of perfgate, so every layer may import it without
importing the engines.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

FactValue = str | int | float | bool


class Fact(BaseModel):
    """One configuration fact about a running server, with where it was read."""

    model_config = ConfigDict(extra="forbid")
    value: FactValue = Field(description="The fact's value.")
    source: str = Field(description="Where it came from: log, command, endpoint or measured.")
    evidence: str | None = Field(None, description="The log line or field it was read from.")


Facts = dict[str, Fact]

__all__ = ["Fact", "FactValue", "Facts"]
