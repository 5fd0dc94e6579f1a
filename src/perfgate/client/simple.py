"""Convenience calls for checks that are not measurements (correctness, readiness)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from perfgate.client.stream import API_PATHS, Api, RequestRecord, request_body, stream_request


class SimpleClient:
    """Blocking one-off requests against a server: plain JSON or one streamed record."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout_s: float = 120.0,
        reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning"),
        fields: dict[str, Any] | None = None,
        transport: httpx.MockTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout_s = timeout_s
        self.reasoning_fields = reasoning_fields
        self.fields = dict(fields or {})  # sent with every request (profile request_fields)
        self.transport = transport  # replays recorded responses in tests
        self.headers = dict(headers or {})  # the server's API key and extra headers

    def complete(
        self, prompt: str, *, api: Api = "completions", max_tokens: int = 16, **params: Any
    ) -> dict[str, Any]:
        """A non-streamed request; returns the response JSON (raises on HTTP errors)."""
        body = request_body(api, self.model, prompt, max_tokens, **{**self.fields, **params})
        body["stream"] = False
        body.pop("stream_options")
        with httpx.Client(
            base_url=self.base_url,
            timeout=self.timeout_s,
            transport=self.transport,
            headers=self.headers,
        ) as client:
            response = client.post(API_PATHS[api], json=body)
            response.raise_for_status()
            return dict(response.json())

    def stream(
        self, prompt: str, *, api: Api = "completions", max_tokens: int = 16, **params: Any
    ) -> RequestRecord:
        """A streamed request, recorded like a measured one."""
        body = request_body(api, self.model, prompt, max_tokens, **{**self.fields, **params})

        async def once() -> RequestRecord:
            async with httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout_s,
                transport=self.transport,
                headers=self.headers,
            ) as c:
                return await stream_request(
                    c,
                    body,
                    api=api,
                    timeout_s=self.timeout_s,
                    reasoning_fields=self.reasoning_fields,
                )

        return asyncio.run(once())
