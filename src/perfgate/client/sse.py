"""Server-sent events framing: bytes in, ``data`` payloads out. Pure; no I/O.

Follows the WHATWG event-stream rules perfgate needs: lines end in CRLF, LF or CR
(also when split across chunks), ``data:`` fields of one event are joined with
newlines, a blank line dispatches the event, comments and other fields are ignored.
"""

from __future__ import annotations

import codecs
import re

_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEDecoder:
    """Incremental decoder; feed it chunks as they arrive, in any split."""

    __slots__ = ("_buffer", "_data", "_pending_cr", "_utf8")

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._data: list[str] = []
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[str]:
        """Decode one chunk; return the data of every event it completed."""
        text = self._utf8.decode(chunk)
        if not text:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if text[0] == "\n":  # the LF of a CRLF split across chunks
                text = text[1:]
        buffer = self._buffer + text
        if "\n" not in buffer and "\r" not in buffer:
            self._buffer = buffer
            return []
        lines = _LINE_END.split(buffer)
        self._buffer = lines.pop()
        self._pending_cr = buffer.endswith("\r")
        events: list[str] = []
        for line in lines:
            self._line(line, events)
        return events

    def finish(self) -> list[str]:
        """End of stream: the last event, even without its closing blank line."""
        events: list[str] = []
        rest = self._buffer + self._utf8.decode(b"", final=True)
        self._buffer = ""
        if rest:
            self._line(rest, events)
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _line(self, line: str, events: list[str]) -> None:
        if not line:
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line[0] == ":":
            return
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value[:1] == " " else value)
