"""The simulator's HTTP server: routes, the token schedule, faults and ground-truth records."""

from __future__ import annotations

import asyncio
import json
import socket
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from time import perf_counter
from typing import Any

from perfgate.sim.config import SimConfig
from perfgate.sim.generation import BadRequest, parse_generation, text_of
from perfgate.sim.http import (
    HttpError,
    Request,
    error_response,
    json_response,
    read_request,
    response,
)
from perfgate.sim.payloads import Api
from perfgate.sim.records import SimRecord
from perfgate.sim.responses import Responder

GENERATE_PATHS: dict[str, Api] = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
GET_PATHS = ("/health", "/v1/models", "/version", "/metrics", "/sim/records")
POST_PATHS = (*GENERATE_PATHS, "/tokenize", "/detokenize", "/sim/reset")
VOCAB_LIMIT = 100_000  # words remembered for /detokenize
VERSION = "perfgate-sim 0.1"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
# Latency histograms of vLLM's size (buckets x families), so reading /metrics costs what a
# real server's text costs to scan
HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds",
              "e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_prefill_time_seconds", "request_decode_time_seconds",
              "request_prompt_tokens", "request_generation_tokens")  # fmt: skip
BUCKETS = tuple(0.001 * 2**i for i in range(24))
KV_SLOTS = 64  # the simulated KV cache holds this many requests


class SimServer(Responder):
    """An OpenAI-compatible streaming server on an exact schedule; see :mod:`perfgate.sim`."""

    def __init__(self, config: SimConfig | None = None, worker: int | None = None) -> None:
        self.config = config or SimConfig()
        self.records: list[SimRecord] = []
        self.in_flight = 0
        self._id_prefix = "sim-" if worker is None else f"sim-w{worker}-"
        self._next_index = 0
        self._connections = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._servers: list[asyncio.Server] = []
        self._vocab: dict[int, str] = {}

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, *, sock: socket.socket | None = None
    ) -> str:
        """Listen (on ``host:port``, or on a bound socket); returns the base URL. Each call
        adds a listener: every one serves every route."""
        if sock is not None:
            server = await asyncio.start_server(self._connection, sock=sock)
        else:
            server = await asyncio.start_server(self._connection, host, port)
        self._servers.append(server)
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        return f"http://{shown}:{bound_port}"

    async def close(self) -> None:
        """Stop listening and end every open connection."""
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers = []

    def reset(self) -> None:
        """Forget the records and restart the arrival index (fault rules start over)."""
        self.records = []
        self._next_index = 0

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._connections += 1
        connection = self._connections
        try:
            while True:
                try:
                    request = await read_request(reader, writer)
                except HttpError as exc:
                    writer.write(error_response(exc.status, str(exc), keep_alive=False))
                    break
                if request is None or not await self._handle(request, connection, writer):
                    break
                if writer.transport.get_write_buffer_size() > self.config.high_water_bytes:
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or close() ends this root task: both are normal
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _handle(
        self, request: Request, connection: int, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; returns whether the connection stays open."""
        keep = request.keep_alive
        path, method = request.path, request.method
        if self._refused(request):
            print(f"perfgate-sim: refused {method} {path}: no valid API key", flush=True)
            writer.write(error_response(401, "invalid API key", keep_alive=keep))
            return keep
        if path not in GET_PATHS and path not in POST_PATHS:
            writer.write(error_response(404, f"no route {method} {path}", keep_alive=keep))
            return keep
        if method != ("GET" if path in GET_PATHS else "POST"):
            writer.write(error_response(405, f"{method} not allowed on {path}", keep_alive=keep))
            return keep
        if path == "/metrics":
            body = self.metrics_text().encode()
            writer.write(response(200, body, keep_alive=keep, content_type=PROMETHEUS_TEXT))
            return keep
        if method == "GET":
            writer.write(json_response(200, self._get(path), keep_alive=keep))
            return keep
        try:
            body = json.loads(request.body or b"{}")
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
        except ValueError as exc:
            writer.write(error_response(400, f"invalid JSON body: {exc}", keep_alive=keep))
            return keep
        except BadRequest as exc:
            writer.write(error_response(400, str(exc), keep_alive=keep))
            return keep
        api = GENERATE_PATHS.get(path)
        if api is None:
            try:
                result = self._post(path, body)
            except BadRequest as exc:
                writer.write(error_response(400, str(exc), keep_alive=keep))
                return keep
            writer.write(json_response(200, result, keep_alive=keep))
            return keep
        try:
            generation = parse_generation(
                api, body, request.headers, self.config.default_max_tokens
            )
        except BadRequest as exc:
            writer.write(error_response(400, str(exc), keep_alive=keep))
            return keep
        return await self._generate(generation, path, connection, keep, writer)

    def _refused(self, request: Request) -> bool:
        """Whether an API key is required and this request lacks it (all but /health and
        the simulator's own /sim/ paths need it)."""
        key = self.config.api_key
        if not key or request.path == "/health" or request.path.startswith("/sim/"):
            return False
        return request.headers.get("authorization") != f"Bearer {key}"

    def _get(self, path: str) -> Any:
        if path == "/health":
            return {"status": "ok"}
        if path == "/version":
            return {"version": VERSION}
        if path == "/v1/models":
            model = {"id": self.config.model, "object": "model", "created": 0, "owned_by": "sim"}
            return {"object": "list", "data": [model]}
        return {
            "clock": "perf_counter",
            "now": perf_counter(),
            "records": [record.to_dict() for record in self.records],
        }

    def metrics_text(self) -> str:
        """Prometheus text in vLLM's V1 names: requests running (in flight; none ever
        wait), KV-cache use (in flight of :data:`KV_SLOTS`), tokens generated, and
        latency histograms of vLLM's size (empty: their cost is reading them)."""
        label = f'{{engine="0",model_name="{self.config.model}"}}'
        generated = sum(sum(r.tokens) for r in self.records)
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {self.in_flight}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{label} 0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{label} {min(1.0, self.in_flight / KV_SLOTS)}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{label} 0",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{label} {generated}",
        ]
        for name in HISTOGRAMS:
            lines.append(f"# TYPE vllm:{name} histogram")
            lines += [
                f'vllm:{name}_bucket{{engine="0",le="{b:g}",model_name="{self.config.model}"}} 0'
                for b in BUCKETS
            ]
            lines += [f"vllm:{name}_count{label} 0", f"vllm:{name}_sum{label} 0.0"]
        return "\n".join(lines) + "\n"

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        if path == "/sim/reset":
            self.reset()
            return {"status": "ok"}
        if path == "/tokenize":
            return self._tokenize(body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise BadRequest("tokens must be a list of integers")
        text = " ".join(self._vocab.get(t, f"w{t}") for t in tokens)
        return {"content": text, "prompt": text}

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """One id per whitespace-separated word: a CRC-32 of the word, remembered for
        /detokenize. Takes llama.cpp's ``content``, or vLLM's ``prompt`` or ``messages``."""
        if isinstance(body.get("messages"), list):
            text = " ".join(
                text_of(m.get("content")) for m in body["messages"] if isinstance(m, dict)
            )
        else:
            given = body.get("content", body.get("prompt"))
            if not isinstance(given, str):
                raise BadRequest("give the text to tokenize as content (or prompt) string")
            text = given
        ids = []
        for word in text.split():
            token = zlib.crc32(word.encode())
            if len(self._vocab) < VOCAB_LIMIT:
                self._vocab.setdefault(token, word)
            ids.append(token)
        return {"tokens": ids, "count": len(ids)}


@asynccontextmanager
async def serve(
    config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run the simulator on this event loop; yields its base URL. For fast unit tests only:
    timings measured against it share the client's loop."""
    server = SimServer(config)
    url = await server.start(host, port)
    try:
        yield url
    finally:
        with suppress(Exception):
            await server.close()
