"""The simulator's answers to generation requests: on the exact token schedule, streamed
or whole, with the configured faults, each recorded as ground truth."""

from __future__ import annotations

import asyncio
import time
from time import perf_counter

from perfgate.sim.config import Fault, SimConfig
from perfgate.sim.generation import Generation
from perfgate.sim.http import error_body, json_response, response, stream_head
from perfgate.sim.payloads import (
    DONE,
    MALFORMED_EVENT,
    StreamEncoder,
    burst_chunks,
    completion_body,
    error_event,
)
from perfgate.sim.records import SimRecord


async def _sleep_until(target: float) -> None:
    while (delay := target - perf_counter()) > 0:
        await asyncio.sleep(delay)


class Responder:
    """The generation half of :class:`~perfgate.sim.server.SimServer` (its state: the
    config, records, in-flight count and id prefix)."""

    config: SimConfig
    records: list[SimRecord]
    in_flight: int
    _id_prefix: str
    _next_index: int

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
