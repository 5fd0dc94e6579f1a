"""The simulator's HTTP server: routes, the token schedule, faults and ground-truth records."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from time import perf_counter
from typing import Any

from perfgate.sim.config import Fault, SimConfig
from perfgate.sim.generation import BadRequest, Generation, parse_generation, text_of
from perfgate.sim.http import (
    HttpError,
    Request,
    error_body,
    error_response,
    json_response,
    read_request,
    response,
    stream_head,
)
from perfgate.sim.payloads import (
    DONE,
    MALFORMED_EVENT,
    Api,
    StreamEncoder,
    burst_chunks,
    completion_body,
    error_event,
)
from perfgate.sim.records import SimRecord

GENERATE_PATHS: dict[str, Api] = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
GET_PATHS = ("/health", "/v1/models", "/version", "/sim/records")
POST_PATHS = (*GENERATE_PATHS, "/tokenize", "/detokenize", "/sim/reset")
VOCAB_LIMIT = 100_000  # words remembered for /detokenize
VERSION = "perfgate-sim 0.1"


async def _sleep_until(target: float) -> None:
    while (delay := target - perf_counter()) > 0:
        await asyncio.sleep(delay)


class SimServer:
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
            text = body.get("content", body.get("prompt"))
            if not isinstance(text, str):
                raise BadRequest("give the text to tokenize as content (or prompt) string")
        ids = []
        for word in text.split():
            token = zlib.crc32(word.encode())
            if len(self._vocab) < VOCAB_LIMIT:
                self._vocab.setdefault(token, word)
            ids.append(token)
        return {"tokens": ids, "count": len(ids)}

    async def _generate(
        self, gen: Generation, path: str, connection: int, keep: bool, writer: asyncio.StreamWriter
    ) -> bool:
        arrival = perf_counter()
        config = self.config
        index = self._next_index
        self._next_index += 1
        fault = gen.fault or config.fault_for(index)
        record = SimRecord(
            id=f"{self._id_prefix}{index}",
            index=index,
            path=path,
            stream=gen.stream,
            arrival=arrival,
            prompt_tokens=gen.prompt_tokens,
            max_tokens=gen.max_tokens,
            connection=connection,
            tag=gen.tag,
            fault=None if fault is None else fault.to_dict(),
        )
        self.records.append(record)
        extra = f"x-sim-request-id: {record.id}\r\n"
        if fault is not None and fault.kind == "http_error":
            record.status = fault.status
            body = error_body(fault.status, fault.message)
            writer.write(json_response(fault.status, body, keep_alive=keep, extra_headers=extra))
            record.end = perf_counter()
            record.outcome = "fault"
            return keep
        self.in_flight += 1
        try:
            if gen.stream:
                return await self._stream(gen, record, fault, writer, extra) and keep
            return await self._whole(gen, record, fault, writer, keep, extra)
        except ConnectionError:
            record.outcome = "client_closed"
            return False
        finally:
            self.in_flight -= 1
            record.end = perf_counter()

    async def _stream(
        self,
        gen: Generation,
        record: SimRecord,
        fault: Fault | None,
        writer: asyncio.StreamWriter,
        extra: str,
    ) -> bool:
        """Write the stream on schedule; returns whether the connection can be reused."""
        config = self.config
        transport = writer.transport
        encoder = StreamEncoder(
            gen.api,
            record.id,
            config.model,
            int(time.time()),
            reasoning_tokens=config.reasoning_tokens,
            reasoning_field=config.reasoning_field,
        )
        transport.write(stream_head(extra) + (encoder.role() if gen.api == "chat" else b""))
        if config.burst and fault is None:
            return await self._burst(gen, record, writer)
        total, per_chunk, itl = gen.max_tokens, config.tokens_per_chunk, config.itl_s
        slowdown, high_water = config.batch_slowdown, config.high_water_bytes
        fault_at = -1 if fault is None else min(fault.after, -(-total // per_chunk))
        scheduled, written, tokens = record.scheduled, record.written, record.tokens
        target = record.arrival + config.ttft_s
        start = chunk = 0
        while True:
            count = min(per_chunk, total - start)
            if chunk:
                target += count * itl * (1.0 + slowdown * (self.in_flight - 1))
            if chunk == fault_at:
                assert fault is not None
                if fault.kind == "stall":
                    target += fault.stall_s
                else:
                    if count:  # the fault takes the place of this chunk, at its time
                        await _sleep_until(target)
                    return self._end_with_fault(fault, record, transport)
            if not count:
                break
            await _sleep_until(target)
            if transport.is_closing():
                record.outcome = "client_closed"
                return False
            transport.write(encoder.tokens(start, count, start + count == total))
            now = perf_counter()
            scheduled.append(target)
            written.append(now)
            tokens.append(count)
            start += count
            chunk += 1
            if transport.get_write_buffer_size() > high_water:
                await writer.drain()
        if fault is not None and fault.kind == "stall" and fault_at == chunk:
            await _sleep_until(target)
        if transport.is_closing():
            record.outcome = "client_closed"
            return False
        tail = encoder.usage(gen.prompt_tokens, total) if gen.include_usage else b""
        transport.write(tail + DONE)
        record.outcome = "ok"
        return True

    async def _burst(
        self, gen: Generation, record: SimRecord, writer: asyncio.StreamWriter
    ) -> bool:
        """Write the whole stream at once, at the first chunk's time (``SimConfig.burst``)."""
        config = self.config
        target = record.arrival + config.ttft_s
        await _sleep_until(target)
        if writer.transport.is_closing():
            record.outcome = "client_closed"
            return False
        total, per_chunk = gen.max_tokens, config.tokens_per_chunk
        writer.write(
            burst_chunks(
                gen.api,
                config.model,
                total,
                per_chunk,
                gen.prompt_tokens if gen.include_usage else None,
                config.reasoning_tokens,  # StreamEncoder ignores it outside chat
                config.reasoning_field,
            )
        )
        now = perf_counter()
        chunks = -(-total // per_chunk)
        record.scheduled.extend([target] * chunks)
        record.written.extend([now] * chunks)
        record.tokens.extend([per_chunk] * (chunks - 1) + [total - per_chunk * (chunks - 1)])
        await writer.drain()
        record.outcome = "ok"
        return True

    @staticmethod
    def _end_with_fault(fault: Fault, record: SimRecord, transport: asyncio.WriteTransport) -> bool:
        record.outcome = "fault"
        if fault.kind == "cut":
            transport.close()  # buffered chunks still go out, then FIN: no end of the body
            return False
        if fault.kind == "malformed":
            transport.write(MALFORMED_EVENT + DONE)
        else:
            transport.write(error_event(fault.status, fault.message) + DONE)
        return True

    async def _whole(
        self,
        gen: Generation,
        record: SimRecord,
        fault: Fault | None,
        writer: asyncio.StreamWriter,
        keep: bool,
        extra: str,
    ) -> bool:
        """A non-streamed answer, written when the last token is due."""
        config = self.config
        first = min(config.tokens_per_chunk, gen.max_tokens)
        slowdown = 1.0 + config.batch_slowdown * (self.in_flight - 1)
        target = record.arrival + config.ttft_s + (gen.max_tokens - first) * config.itl_s * slowdown
        if fault is not None and fault.kind == "stall":
            target += fault.stall_s
        await _sleep_until(target)
        if writer.transport.is_closing():
            record.outcome = "client_closed"
            return False
        if fault is not None and fault.kind == "cut":
            record.outcome = "fault"
            writer.transport.close()
            return False
        if fault is not None and fault.kind == "malformed":
            data = response(200, b"{not json", keep_alive=keep, extra_headers=extra)
        elif fault is not None and fault.kind == "error_event":
            body = error_body(fault.status, fault.message)
            data = json_response(200, body, keep_alive=keep, extra_headers=extra)
        else:
            body = completion_body(
                gen.api,
                record.id,
                config.model,
                int(time.time()),
                prompt_tokens=gen.prompt_tokens,
                completion_tokens=gen.max_tokens,
                reasoning_tokens=config.reasoning_tokens,
                reasoning_field=config.reasoning_field,
            )
            data = json_response(200, body, keep_alive=keep, extra_headers=extra)
        writer.write(data)
        record.scheduled.append(target)
        record.written.append(perf_counter())
        record.tokens.append(gen.max_tokens)
        record.outcome = "ok" if fault is None or fault.kind == "stall" else "fault"
        return keep


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
