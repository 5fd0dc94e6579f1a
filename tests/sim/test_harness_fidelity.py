"""perfgate's load path against the simulator's ground truth: when requests leave, what
TTFT counts, and which connections carry them.

The simulator runs in its own process; both sides read one CLOCK_MONOTONIC. Only causal
bounds are asserted (a request is read after it was sent; a first token is written at
least ``ttft_s`` after the request was read), never upper bounds: these machines are
shared. How close the harness comes is measured by ``benchmarks/harness_fidelity.py``.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from perfgate.client.transport import pooled_client
from perfgate.load.level import run_level
from perfgate.load.workers import HttpxWorkers, RequestPlan, WireWorkers
from perfgate.sim import SimConfig, SimProcess
from perfgate.workload.prompts import Prompt

CONCURRENCY = 64
TTFT_S = 0.02


WORKERS = {
    "wire": WireWorkers,  # the measurement's client
    "httpx": lambda url: HttpxWorkers(lambda: pooled_client(url, 1, 30)),
}


@pytest.mark.parametrize("client", WORKERS)
def test_a_burst_of_64_requests_on_warm_connections_stamps_send_and_ttft_causally(client):
    """All 64 requests of a level start together (the case where httpx's trace events
    stamped a request as sent after the server had read it, and 121 of 320 TTFTs came
    out shorter than the server's own 20 ms)."""
    config = SimConfig(ttft_s=TTFT_S, itl_s=0.004)
    plan = RequestPlan(api="completions", model="sim", output_len=16, request_timeout_s=30)
    prompts = [Prompt(f"prompt {i} " + "word " * 50, None) for i in range(CONCURRENCY * 3)]

    async def level(base_url: str):
        async with WORKERS[client](base_url) as workers:
            return await run_level(
                workers, plan, prompts, concurrency=CONCURRENCY, warmup=0, level_timeout_s=60
            )

    with SimProcess(config) as sim:
        run = asyncio.run(level(sim.base_url))
        truth = [t for t in sim.records() if t.path != "/v1/models"]
    assert all(r.ok for r in run.records), {r.error for r in run.records}
    assert len(truth) == len(run.records) == CONCURRENCY * 3
    arrivals = sorted(t.arrival for t in truth)
    sends = sorted(r.sent for r in run.records if r.sent is not None)
    assert len(sends) == len(run.records), "every request's send was stamped"
    # the k-th request read by the server was sent no later than that (sorted pairing)
    assert all(s <= a for s, a in zip(sends, arrivals, strict=True))
    assert min(r.ttft for r in run.records) >= TTFT_S  # never shorter than the server's
    # connections were opened before the clock and reused: one per request in flight
    assert len({t.connection for t in truth}) == CONCURRENCY
    # and all 64 were in flight at the server at once (a shared httpx pool managed 14)
    events = sorted([(t.arrival, 1) for t in truth] + [(t.end, -1) for t in truth])
    in_flight = list(itertools.accumulate(step for _, step in events))
    assert max(in_flight) == CONCURRENCY
    assert run.harness is not None and run.harness.ticks > 0
