"""``multi-turn``: whole conversations from the dataset, each turn sent with the
conversation so far."""

from __future__ import annotations

from perfgate.profile import WorkloadSpec
from perfgate.workload.conversations import conversation_prompts
from perfgate.workload.kinds import Draw, PromptKind, register
from perfgate.workload.kinds.dataset import conversations
from perfgate.workload.prompts import Prompt


class MultiTurn(PromptKind):
    """A request per turn; replies at most ``output_len`` tokens."""

    names = ("multi-turn",)

    def one_length(self, workload: WorkloadSpec) -> bool:
        return False  # each turn's reply, at most output_len

    def lengths(self, workload: WorkloadSpec) -> str:
        w = workload
        return f"{w.dataset} turns, at most {w.input_len} in / {w.output_len} out tokens"

    def draw(self, draw: Draw) -> list[Prompt]:
        found = conversations(draw)
        with draw.step(f"{draw.run}: counting dataset prompts", draw.count, unit="prompts") as t:
            return conversation_prompts(
                draw.tokenizer(),
                found,
                draw.count,
                draw.seed,
                max_output=draw.workload.output_len,
                counted=draw.cache.setdefault("dataset_counts", {}),
                on_counted=t.update,
            )


register(MultiTurn())
