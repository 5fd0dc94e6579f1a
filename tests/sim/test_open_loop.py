"""Open-loop load: seeded arrival schedules (their rates and burstiness checked by
simulation), and the scheduled runner on a mock server with an exact service time:
requests leave on schedule whether or not earlier ones were answered, latency counts
from the scheduled time, and a request held back by the cap on requests in flight
carries that wait both in its latency and as its client delay."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from perfgate.load.level import RateShape, run_rate_level
from perfgate.load.workers import WireWorkers
from perfgate.measure.data import LevelData
from perfgate.sim import SimConfig, SimProcess
from perfgate.workload.arrivals import arrival_offsets
from tests.sim.test_load import PLAN, prompts


def _gaps(offsets):
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(
    ("arrival", "burstiness", "cv"),
    [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5), ("constant", 1.0, 0.0)],
)
def test_arrivals_have_the_asked_rate_and_burstiness(arrival, burstiness, cv):
    """20,000 gaps: their mean is 1 / rate within 4 standard errors, and their coefficient
    of variation is 1 / sqrt(burstiness) (1 for Poisson, 0 for evenly spaced)."""
    n, rate = 20_000, 8.0
    gaps = _gaps(arrival_offsets(n, rate, arrival, burstiness, seed=3))
    mean, sd = statistics.fmean(gaps), statistics.pstdev(gaps)
    assert abs(mean - 1 / rate) <= 4 * (cv / rate) / math.sqrt(n) + 1e-12
    assert sd / mean == pytest.approx(cv, abs=0.05)
    assert arrival_offsets(10, rate, arrival, burstiness, seed=3) == arrival_offsets(
        10, rate, arrival, burstiness, seed=3
    )
    assert arrival_offsets(1, rate, arrival, burstiness)[0] == 0.0


def test_bad_rates_are_refused():
    with pytest.raises(ValueError, match="rate must be > 0"):
        arrival_offsets(3, 0.0)
    with pytest.raises(ValueError, match="burstiness must be > 0"):
        arrival_offsets(3, 1.0, "gamma", 0.0)


async def _level(rate, cap, n=20):
    """An open-loop level against the simulator (a real HTTP server here, any number of
    requests at once, each answered in 0.19 s + 0.01 s per further token: 0.2 s)."""
    with SimProcess(SimConfig(ttft_s=0.19, itl_s=0.01)) as sim:
        async with WireWorkers(sim.base_url) as workers:
            return await run_rate_level(
                workers,
                PLAN,
                prompts(n + 1),
                rate=rate,
                shape=RateShape(arrival="constant", max_in_flight=cap),
                warmup=1,
                level_timeout_s=30,
            )


def _in_flight_peak(records):
    events = sorted([(r.sent, 1) for r in records] + [(r.end, -1) for r in records])
    return max(itertools.accumulate(d for _, d in events))


@pytest.mark.asyncio
async def test_requests_leave_on_schedule_whatever_the_answers():
    """50 requests a second, each answered in 0.2 s: about 10 in flight, none waits for
    an answer. Checked against the records' own times, not a bound on the client's
    lateness: CI saw a stalled host send two requests 0.10 and 0.15 s late."""
    level = await _level(rate=50.0, cap=None)
    records = sorted(level.records, key=lambda r: r.index)
    assert all(r.ok for r in records) and len(records) == 20
    assert _in_flight_peak(records) >= 8  # none waited for an answer before sending
    scheduled = [r.scheduled - records[0].scheduled for r in records]
    assert scheduled == pytest.approx([i / 50 for i in range(20)], abs=1e-6)
    for r in records:  # never early, and the lateness is what the record says
        assert r.sent >= r.scheduled - 1e-3
        assert r.client_delay == pytest.approx(r.sent - r.scheduled)
    # each request leaves 0.02 s after the one before it, which is answered 0.2 s after it
    # left: a runner that waited for answers (a closed loop) would send none before its
    # predecessor ended; one stall longer than 0.18 s may fall between two sends
    before_predecessor_ended = sum(r.sent < p.end for p, r in itertools.pairwise(records))
    assert before_predecessor_ended >= len(records) - 2
    # latency counts from the schedule: the 0.2 s service at least (a slow host only adds)
    assert all(r.latency >= r.client_delay + 0.2 - 1e-3 for r in records)
    data = LevelData.from_run(level)
    assert data.rate == 50.0 and data.level == 50.0


@pytest.mark.asyncio
async def test_a_full_cap_holds_requests_back_and_their_latency_counts_the_wait():
    """The same schedule with at most 2 in flight: the server answers 10 a second while 50
    are due, so the wait before sending grows request after request, and latency (from
    the scheduled time) is that wait plus the 0.2 s service (CI saw 0.29 s on a slow host:
    checked as a floor)."""
    level = await _level(rate=50.0, cap=2)
    records = sorted(level.records, key=lambda r: r.index)
    assert _in_flight_peak(records) == 2
    for r in records:  # the wait, then at least the server's 0.2 s (a slow host only adds)
        assert r.latency >= r.client_delay + 0.2 - 1e-3
    # request i leaves when a slot frees: when i - 1 of the requests before it have ended
    # (the other slot holds the one still running), or at its due time if that is later.
    # Checked against the records' own end times, so that the host's overhead per round
    # (which adds up over 10 rounds on a slow host) does not move the expectation.
    for i, r in enumerate(records):
        ends_before = sorted(e.end for e in records[:i])
        slot_free = ends_before[i - 2] if i >= 2 else r.scheduled
        assert r.sent >= slot_free - 1e-3
        assert r.sent == pytest.approx(max(slot_free, r.scheduled), abs=0.1)  # a stalled host
    # the schedule ran ahead of the server (10 answers a second, 50 due): the wait grows
    # to about 0.2 * 9 - 19 / 50 = 1.42 s, and latency counts it
    assert records[-1].client_delay > 1.2
    assert records[-1].latency > 1.4  # queueing counted, not hidden


@pytest.mark.asyncio
async def test_a_conversations_turns_go_in_order_each_after_the_previous_answer():
    """Closed loop, 2 in flight, 3 conversations of 3, 1 and 4 turns: each worker sends a
    conversation's turns one after another, every turn after the one before it ended."""
    from perfgate.load.level import run_level
    from perfgate.workload.prompts import Prompt

    prompts = []
    for n in (3, 1, 4):
        history: tuple[tuple[str, str], ...] = ()
        for k in range(n):
            prompts.append(Prompt(f"turn {k}", None, None, history))
            history = (*history, (f"turn {k}", "reply"))
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.01)) as sim:
        async with WireWorkers(sim.base_url) as workers:
            level = await run_level(
                workers, PLAN, [Prompt("warm", None), *prompts], concurrency=2,
                warmup=1, level_timeout_s=30,
            )  # fmt: skip
    records = sorted(level.records, key=lambda r: r.index)
    assert all(r.ok for r in records) and len(records) == 8
    for i, prompt in enumerate(prompts):
        if prompt.history:  # a later turn: sent after the previous turn's answer ended
            assert records[i].start >= records[i - 1].end
    # the two workers overlapped: not everything ran one after another
    assert any(b.start < a.end for a, b in itertools.pairwise(records))
