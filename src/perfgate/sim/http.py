"""Minimal HTTP/1.1 on asyncio streams: read one request, build response bytes.

Enough for OpenAI clients (httpx, curl, aiohttp): keep-alive, ``Content-Length`` request
bodies, ``Expect: 100-continue``, chunked responses for streams. No chunked request bodies.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

MAX_BODY_BYTES = 64 * 1024 * 1024
STREAM_END = b"0\r\n\r\n"


class HttpError(Exception):
    """A request that cannot be read; answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Request:
    """One parsed request."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    """The next request on a connection, or None when the client closed it between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpError(400, "connection closed inside the request head") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "request head too large") from exc
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"malformed header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(501, "chunked request bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError as exc:
        raise HttpError(400, "Content-Length is not a number") from exc
    if length < 0 or length > MAX_BODY_BYTES:
        raise HttpError(413, f"request body of {length} bytes refused")
    if length and headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError as exc:
        raise HttpError(400, "connection closed inside the request body") from exc
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    path, _, query = target.partition("?")
    return Request(method, path, query, headers, body, keep_alive)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def response(
    status: int,
    body: bytes,
    *,
    keep_alive: bool,
    content_type: str = "application/json",
    extra_headers: str = "",
) -> bytes:
    """A complete response with ``Content-Length``."""
    head = (
        f"HTTP/1.1 {status} {_reason(status)}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
        f"{extra_headers}\r\n"
    )
    return head.encode("latin-1") + body


def json_response(status: int, obj: Any, *, keep_alive: bool, extra_headers: str = "") -> bytes:
    """A complete JSON response."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    return response(status, body, keep_alive=keep_alive, extra_headers=extra_headers)


def error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI-style error object."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 404:
        kind = "not_found_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def error_response(status: int, message: str, *, keep_alive: bool) -> bytes:
    """A complete response carrying an OpenAI-style error body."""
    return json_response(status, error_body(status, message), keep_alive=keep_alive)


def stream_head(extra_headers: str = "") -> bytes:
    """Headers of a chunked server-sent-events response on a kept-alive connection."""
    return (
        "HTTP/1.1 200 OK\r\n"
        "Content-Type: text/event-stream\r\n"
        "Cache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n"
        "Connection: keep-alive\r\n"
        f"{extra_headers}\r\n"
    ).encode("latin-1")


def frame(payload: bytes) -> bytes:
    """One piece of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)
