"""Speculative-decoding counters from a server's Prometheus text (``/metrics``)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field


class SpecStats(BaseModel):
    """Speculative-decoding counters: read from a server (lifetime totals), or over
    exactly one measured level run (the deltas of two readings: :meth:`minus`)."""

    drafts: float = Field(description="Draft rounds.")
    draft_tokens: float = Field(description="Tokens proposed by the drafter.")
    accepted: float = Field(description="Proposed tokens the target model accepted.")
    accepted_per_position: list[float] = Field(
        default_factory=list, description="Accepted tokens by draft position."
    )

    @property
    def accept_rate(self) -> float | None:
        """accepted / draft tokens."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accept_length(self) -> float | None:
        """1 + accepted / drafts: tokens gained per target forward pass."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position_rates(self) -> list[float]:
        """Acceptance rate at each draft position (accepted there / drafts)."""
        return [a / self.drafts for a in self.accepted_per_position] if self.drafts else []

    def minus(self, before: SpecStats) -> SpecStats:
        """Counts of the window between two readings."""
        earlier = before.accepted_per_position
        return SpecStats(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted=self.accepted - before.accepted,
            accepted_per_position=[
                a - (earlier[i] if i < len(earlier) else 0)
                for i, a in enumerate(self.accepted_per_position)
            ],
        )


def parse_spec_counters(text: str, prefix: str) -> SpecStats | None:
    """vLLM-style spec-decode counters (``<prefix>num_drafts`` ...) from Prometheus text;
    None when the server exposes none (speculation off)."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :]
            if key == "num_accepted_tokens_per_pos":
                per_pos[int(sample.labels.get("position", 0))] = sample.value
            else:
                values[key] = values.get(key, 0.0) + sample.value
    if "num_draft_tokens" not in values:
        return None
    return SpecStats(
        drafts=values.get("num_drafts", 0.0),
        draft_tokens=values["num_draft_tokens"],
        accepted=values.get("num_accepted_tokens", 0.0),
        accepted_per_position=[per_pos[k] for k in sorted(per_pos)],
    )
