"""Conversations read from a ShareGPT-style JSONL file, and the shipped one.

Format (one JSON object per line; blank lines are skipped)::

    {"id": "any", "conversations": [
        {"from": "human", "value": "first question"},
        {"from": "gpt", "value": "its answer"},
        {"from": "human", "value": "a follow-up"}, ...]}

``from`` is ``human`` or ``user`` for a user turn and ``gpt`` or ``assistant`` for a reply
(ShareGPT's and OpenAI's names); ``system`` turns are skipped. A conversation needs at
least one user turn followed by a reply. A file that is one JSON array of such objects
(ShareGPT's own download) is read too.

``perfgate:conversations`` names the dataset shipped with perfgate
(``perfgate/data/conversations.jsonl``, made by ``scripts/make_conversations.py``: the
project's own prompts, a real small model's replies).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from perfgate.errors import WorkloadError

SHIPPED_PREFIX = "perfgate:"
USER = {"human", "user"}
REPLY = {"gpt", "assistant", "chatgpt", "bard", "bing"}


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message and the reply it got in the dataset."""

    user: str
    reply: str


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation's turns, in order."""

    id: str
    turns: tuple[Turn, ...]


def shipped_names() -> list[str]:
    """Datasets shipped with perfgate, as ``perfgate:<name>``."""
    data = resources.files("perfgate") / "data"
    return sorted(
        SHIPPED_PREFIX + p.name.removesuffix(".jsonl")
        for p in data.iterdir()
        if p.name.endswith(".jsonl")
    )


def _parse(item: object, where: str) -> Conversation | None:
    if not isinstance(item, dict) or not isinstance(item.get("conversations"), list):
        raise WorkloadError(f"{where}: expected an object with a 'conversations' list")
    turns: list[Turn] = []
    pending: str | None = None
    for k, message in enumerate(item["conversations"]):
        if not isinstance(message, dict) or not isinstance(message.get("value"), str):
            raise WorkloadError(f"{where}: conversations[{k}] needs 'from' and a 'value' string")
        role = str(message.get("from", "")).lower()
        if role in USER:
            pending = message["value"]
        elif role in REPLY and pending is not None:
            turns.append(Turn(pending, message["value"]))
            pending = None
        elif role not in REPLY and role != "system":
            raise WorkloadError(
                f"{where}: conversations[{k}] has from={role!r}; expected human/user, "
                "gpt/assistant or system"
            )
    if not turns:
        return None  # no user turn with a reply: nothing to send
    return Conversation(str(item.get("id", where)), tuple(turns))


def load_conversations(source: str, root: Path) -> list[Conversation]:
    """The conversations of a JSONL (or JSON array) file: ``perfgate:<name>`` for a shipped
    one, else a path (relative to ``root``). Errors name the file and line."""
    if source.startswith(SHIPPED_PREFIX):
        name = source.removeprefix(SHIPPED_PREFIX)
        shipped = resources.files("perfgate") / "data" / f"{name}.jsonl"
        if not shipped.is_file():
            raise WorkloadError(
                f"no shipped dataset {source!r}; shipped: {', '.join(shipped_names())}"
            )
        text, label = shipped.read_text(encoding="utf-8"), source
    else:
        path = Path(source).expanduser()
        path = path if path.is_absolute() else root / path
        try:
            text, label = path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise WorkloadError(f"cannot read dataset {path}: {exc.strerror or exc}") from exc
    out: list[Conversation] = []
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{label}: not valid JSON ({exc})") from exc
        entries = [(item, f"{label}: item {i}") for i, item in enumerate(items)]
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((json.loads(line), f"{label}:{n}"))
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{label}:{n}: not valid JSON ({exc.msg})") from exc
    for item, where in entries:
        if (conversation := _parse(item, where)) is not None:
            out.append(conversation)
    if not out:
        raise WorkloadError(f"{label}: no conversation with a user turn and a reply")
    return out
