"""Prompts from a conversation dataset: lengths drawn around the planned ones, single
prompts (``dataset``) or whole multi-turn conversations."""

from __future__ import annotations

import random
from collections.abc import Sequence

from perfgate.errors import WorkloadError
from perfgate.workload.dataset import Conversation
from perfgate.workload.prompts import Counted, Counter, Prompt


def drawn_lengths(seed: int, count: int, length: int, ratio: float, floor: int = 1) -> list[int]:
    """``count`` lengths drawn uniformly (seeded) from ``length`` x [1 - ratio, 1 + ratio],
    at least ``floor``; all exactly ``length`` when ``ratio`` is 0."""
    if ratio <= 0:
        return [length] * count
    rng = random.Random(f"{seed}:lengths:{length}")
    low, high = max(floor, round(length * (1 - ratio))), max(floor, round(length * (1 + ratio)))
    return [rng.randint(low, high) for _ in range(count)]


MAX_DATASET_DRAWS = 20  # conversations looked at per prompt wanted, before giving up


def dataset_prompts(
    tokenizer: Counter,
    conversations: Sequence[Conversation],
    count: int,
    seed: int,
    *,
    max_input: int,
    max_output: int,
    counted: dict[str, tuple[int, int]],
    on_counted: Counted | None = None,
) -> list[Prompt]:
    """``count`` prompts drawn (seeded, with replacement) from ``conversations``: each the
    first user turn, asking for as many tokens as the dataset's reply had (at most
    ``max_output``); prompts longer than ``max_input`` tokens are passed over. Lengths
    are the server's counts (``counted`` keeps them by conversation id, across calls)."""
    rng = random.Random(f"{seed}:dataset")
    empty = counted.setdefault("", (tokenizer.count(""), 0))[0]  # specials and template
    prompts: list[Prompt] = []
    for _ in range(count * MAX_DATASET_DRAWS):
        if len(prompts) == count:
            break
        conversation = rng.choice(conversations)
        turn = conversation.turns[0]
        if conversation.id not in counted:
            reply = max(1, tokenizer.count(turn.reply) - empty)
            counted[conversation.id] = (tokenizer.count(turn.user), reply)
        tokens, reply = counted[conversation.id]
        if tokens <= max_input:
            prompts.append(Prompt(turn.user, tokens, min(reply, max_output)))
            if on_counted is not None:
                on_counted(len(prompts))
    if len(prompts) < count:
        raise WorkloadError(
            f"the dataset has too few prompts of at most {max_input} tokens (input_len): "
            f"{len(prompts)} found in {count * MAX_DATASET_DRAWS} draws; raise input_len"
        )
    return prompts


def conversation_prompts(
    tokenizer: Counter,
    conversations: Sequence[Conversation],
    count: int,
    seed: int,
    *,
    max_output: int,
    counted: dict[str, tuple[int, int]],
    on_counted: Counted | None = None,
) -> list[Prompt]:
    """``count`` requests that replay conversations drawn (seeded, with replacement) from
    ``conversations``, turn after turn: turn k resends the k earlier user turns and their
    dataset replies (``Prompt.history``), and asks for as many tokens as its own reply had
    (at most ``max_output``). The last conversation may end early. Prompt lengths are not
    counted (``tokens`` None): the server's usage says them."""
    rng = random.Random(f"{seed}:conversations")
    empty = counted.setdefault("", (tokenizer.count(""), 0))[0]
    prompts: list[Prompt] = []
    while len(prompts) < count:
        conversation = rng.choice(conversations)
        history: tuple[tuple[str, str], ...] = ()
        for k, turn in enumerate(conversation.turns):
            if len(prompts) == count:
                break
            key = f"{conversation.id}:turn{k}"
            if key not in counted:
                counted[key] = (0, max(1, tokenizer.count(turn.reply) - empty))
            prompts.append(Prompt(turn.user, None, min(counted[key][1], max_output), history))
            history = (*history, (turn.user, turn.reply))
            if on_counted is not None:
                on_counted(len(prompts))
    return prompts
