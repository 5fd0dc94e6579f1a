"""Streaming client: SSE framing, one-request-one-record streaming, one-off calls."""

from perfgate.client.simple import SimpleClient
from perfgate.client.sse import SSEDecoder
from perfgate.client.stream import (
    API_PATHS,
    Api,
    RequestRecord,
    encode_body,
    request_body,
    stream_request,
)

__all__ = [
    "API_PATHS",
    "Api",
    "RequestRecord",
    "SSEDecoder",
    "SimpleClient",
    "encode_body",
    "request_body",
    "stream_request",
]
