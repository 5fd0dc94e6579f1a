"""How many streamed chunks per second perfgate-sim sustains, and how late its writes are.

Starts the simulator in its own process (:class:`perfgate.sim.SimProcess`), keeps ``C``
streams running for ``--seconds`` with perfgate's own client (``stream_request`` on one
pooled httpx client), then reads the server's records. Reports:

- chunks/s the server wrote and chunks/s the client received;
- the server's lateness (write time - scheduled time), p50/p99/max: its own accuracy;
- the client's delay (client timestamp - server write time), p50/p99: perfgate's own error.

``--raw`` replaces the httpx client by a bare asyncio socket reader, to show what the
server alone can do when the client is not the bottleneck.

    python benchmarks/sim_throughput.py                    # C=256, ITL 10 ms, 1 token/chunk
    python benchmarks/sim_throughput.py --raw --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import httpx

from perfgate.client import RequestRecord, request_body, stream_request
from perfgate.sim import SimConfig, SimProcess, SimRecord


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (NaN of nothing)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _httpx_worker(
    client: httpx.AsyncClient,
    worker: int,
    max_tokens: int,
    until: float,
    out: list[tuple[str, RequestRecord]],
) -> None:
    n = 0
    while time.perf_counter() < until:
        tag = f"{worker}-{n}"
        body = request_body("completions", "sim", "hello world", max_tokens, sim_tag=tag)
        out.append((tag, await stream_request(client, body, index=len(out))))
        n += 1


async def _raw_worker(
    host: str, port: int, max_tokens: int, window: tuple[float, float], out: list[int]
) -> None:
    a, until = window
    reader, writer = await asyncio.open_connection(host, port)
    body = json.dumps(request_body("completions", "sim", "hello world", max_tokens)).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    while time.perf_counter() < until:
        writer.write(head + body)
        received = b""
        while not received.endswith(b"0\r\n\r\n"):
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            received = received[-8:] + data
            if a <= time.perf_counter() < until:
                out[0] += data.count(b'"text"')
    writer.close()


async def _drive(
    base_url: str, concurrency: int, max_tokens: int, seconds: float, raw: bool
) -> tuple[tuple[float, float], int, list[tuple[str, RequestRecord]]]:
    start = time.perf_counter()
    until = start + seconds
    window = (start + min(2.0, seconds / 3), until)
    if raw:
        counter = [0]
        host, port = base_url.removeprefix("http://").split(":")
        await asyncio.gather(
            *(_raw_worker(host, int(port), max_tokens, window, counter) for _ in range(concurrency))
        )
        return window, counter[0], []
    records: list[tuple[str, RequestRecord]] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        await asyncio.gather(
            *(_httpx_worker(client, w, max_tokens, until, records) for w in range(concurrency))
        )
    a, b = window
    chunks = sum(1 for _, r in records for t in r.token_times if a <= t < b)
    return window, chunks, records


def _report(
    window: tuple[float, float],
    client_chunks: int,
    records: list[tuple[str, RequestRecord]],
    server: list[SimRecord],
) -> None:
    a, b = window
    written = [t for r in server for t in r.written if a <= t < b]
    late = [
        w - s for r in server for w, s in zip(r.written, r.scheduled, strict=True) if a <= w < b
    ]
    print(f"requests: server {len(server)}, client {len(records) or '-'}")
    print(f"steady window of {b - a:.1f}s (after the ramp-up, before the ramp-down):")
    print(f"  server wrote {len(written) / (b - a):,.0f} chunks/s")
    print(f"  client got   {client_chunks / (b - a):,.0f} chunks/s")
    print(
        f"  server lateness ms: p50 {pct(late, 0.5) * 1e3:.3f}  p99 {pct(late, 0.99) * 1e3:.3f}"
        f"  max {max(late) * 1e3:.3f}"
    )
    failed = [r for _, r in records if not r.ok]
    if failed:
        print(f"client errors: {len(failed)}, e.g. {failed[0].error}")
    by_tag = {r.tag: r for r in server}
    delays: list[float] = []
    for tag, record in records:
        truth = by_tag.get(tag)
        if record.ok and truth and len(truth.written) == len(record.token_times):
            delays += [c - s for c, s in zip(record.token_times, truth.written, strict=True)]
    if delays:
        print(
            f"  client delay after server write ms: p50 {statistics.median(delays) * 1e3:.3f}  "
            f"p99 {pct(delays, 0.99) * 1e3:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", "-c", type=int, default=256)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--ttft-ms", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--raw", action="store_true", help="bare socket client, no parsing")
    args = parser.parse_args()
    config = SimConfig(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000)
    with SimProcess(config) as sim:
        assert sim.pid is not None
        cpu_before, wall_before = process_cpu_seconds(sim.pid), time.perf_counter()
        window, chunks, records = asyncio.run(
            _drive(sim.base_url, args.concurrency, args.max_tokens, args.seconds, args.raw)
        )
        cpu = (process_cpu_seconds(sim.pid) - cpu_before) / (time.perf_counter() - wall_before)
        server = sim.records()
    print(
        f"C={args.concurrency} ITL {args.itl_ms} ms, {args.max_tokens} tokens/request, "
        f"1 token/chunk, {'raw socket' if args.raw else 'perfgate client (httpx)'}"
    )
    _report(window, chunks, records, server)
    print(f"server process CPU over the whole run: {cpu:.0%} of one core")


if __name__ == "__main__":
    main()
