"""``dataset``: single prompts drawn from a conversation dataset, with their replies'
lengths (each at most the workload's lengths)."""

from __future__ import annotations

from perfgate.errors import WorkloadError
from perfgate.profile import WorkloadSpec
from perfgate.workload.conversations import dataset_prompts
from perfgate.workload.dataset import Conversation, load_conversations
from perfgate.workload.kinds import Draw, PromptKind, register
from perfgate.workload.prompts import Prompt


def conversations(draw: Draw) -> list[Conversation]:
    """The profile's dataset, read once a run; the server must count its prompts."""
    if draw.why:
        raise WorkloadError(
            f"dataset prompts need the server's token counts, and here: {draw.why}; use an "
            "engine with a tokenize endpoint (llamacpp, vllm), or random prompts"
        )
    assert draw.workload.dataset is not None
    if "conversations" not in draw.cache:
        draw.cache["conversations"] = load_conversations(draw.workload.dataset, draw.root)
    return draw.cache["conversations"]


class DatasetPrompts(PromptKind):
    """One prompt a request, from the dataset."""

    names = ("dataset",)

    def one_length(self, workload: WorkloadSpec) -> bool:
        return False  # each reply's own length, at most output_len

    def lengths(self, workload: WorkloadSpec) -> str:
        w = workload
        return f"{w.dataset}, at most {w.input_len} in / {w.output_len} out tokens"

    def draw(self, draw: Draw) -> list[Prompt]:
        w = draw.workload
        found = conversations(draw)
        with draw.step(f"{draw.run}: counting dataset prompts", draw.count, unit="prompts") as t:
            return dataset_prompts(
                draw.tokenizer(),
                found,
                draw.count,
                draw.seed,
                max_input=w.input_len,
                max_output=w.output_len,
                counted=draw.cache.setdefault("dataset_counts", {}),
                on_counted=t.update,
            )


register(DatasetPrompts())
