"""``random`` and ``shared-prefix``: seeded random words of exact token lengths (a shared
prefix of ``prefix_len`` tokens first), estimated where the server cannot count them."""

from __future__ import annotations

from perfgate.workload.approximate import approximate_prompts
from perfgate.workload.conversations import drawn_lengths
from perfgate.workload.kinds import Draw, PromptKind, register
from perfgate.workload.prompts import Prompt, WordCosts, build_prompts, word_cost_counts, word_costs


class RandomWords(PromptKind):
    """Random words; output lengths drawn around ``output_len`` with ``range_ratio``."""

    names = ("random", "shared-prefix")

    def draw(self, draw: Draw) -> list[Prompt]:
        w = draw.workload
        prompts = self._prompts(draw)
        if not w.range_ratio:
            return prompts
        outputs = drawn_lengths(draw.seed + 1, draw.count, w.output_len, w.range_ratio)
        return [Prompt(p.text, p.tokens, n) for p, n in zip(prompts, outputs, strict=True)]

    def _prompts(self, draw: Draw) -> list[Prompt]:
        """Exact where the server can count them, else estimated (said once per reason)."""
        w = draw.workload
        if draw.why:
            prompts, note = approximate_prompts(
                draw.client,
                draw.model,
                draw.count,
                w.input_len,
                draw.seed,
                w.api,
                draw.why,
                prefix_len=w.prefix_len,
            )
            said: set[str] = draw.cache.setdefault("estimated_because", set())
            if draw.why not in said:  # once: later estimates differ slightly
                said.add(draw.why)
                draw.degraded(note)
            return prompts
        tokenizer = draw.tokenizer()
        costs: WordCosts | None = draw.cache.get("word_costs")
        if costs is None:
            total = word_cost_counts()
            with draw.step("counting prompt words' tokens", total, unit="counts") as task:
                costs = draw.cache["word_costs"] = word_costs(tokenizer, on_counted=task.update)
        floor = (w.prefix_len or 0) + 1
        with draw.step(f"{draw.run}: checking prompts", draw.count, unit="prompts") as task:
            return build_prompts(
                tokenizer,
                draw.count,
                drawn_lengths(draw.seed, draw.count, w.input_len, w.range_ratio, floor),
                draw.seed,
                costs,
                on_counted=task.update,
                prefix_len=w.prefix_len,
            )


register(RandomWords())
