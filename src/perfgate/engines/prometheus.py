"""Speculative-decoding counters from a server's Prometheus text (``/metrics``)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Lifetime speculative-decoding counters read from a server's /metrics."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...]

    def minus(self, before: SpecCounters) -> SpecCounters:
        """Counts of the window between two readings."""
        per_pos = tuple(
            a - (before.accepted_per_position[i] if i < len(before.accepted_per_position) else 0)
            for i, a in enumerate(self.accepted_per_position)
        )
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            per_pos,
        )


def parse_spec_counters(text: str, prefix: str) -> SpecCounters | None:
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
    return SpecCounters(
        drafts=values.get("num_drafts", 0.0),
        draft_tokens=values["num_draft_tokens"],
        accepted=values.get("num_accepted_tokens", 0.0),
        accepted_per_position=tuple(per_pos[k] for k in sorted(per_pos)),
    )
