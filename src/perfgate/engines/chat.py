"""How a chat prompt is sent: the one-message conversation engines tokenize and the
workload asks with."""

from __future__ import annotations


def chat_messages(text: str) -> list[dict[str, str]]:
    """The one-message conversation a chat prompt of ``text`` is sent as."""
    return [{"role": "user", "content": text}]
