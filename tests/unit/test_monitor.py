"""The harness's self-monitor: it sees a blocked loop and a descheduled process, and the
warning names the likely reason."""

from __future__ import annotations

import asyncio
import time

import pytest

from perfgate.client.monitor import LoopMonitor, timing_warning
from tests.synthetic import harness_stats as stats


@pytest.mark.asyncio
async def test_a_blocking_callback_shows_as_lag():
    """30 ms of synchronous work in the loop (as parsing 256 responses at once was)."""
    async with LoopMonitor() as monitor:
        await asyncio.sleep(0.05)
        time.sleep(0.03)  # blocks the event loop
        await asyncio.sleep(0.05)
    stats = monitor.stats()
    assert stats.loop_lag_max_s >= 0.02
    assert stats.ticks >= 5 and stats.wall_s >= 0.13


@pytest.mark.asyncio
async def test_a_quiet_loop_shows_little_lag():
    async with LoopMonitor() as monitor:
        await asyncio.sleep(0.1)
    assert monitor.stats().loop_lag_p50_s < 0.01  # a lower bound on honesty, not speed


def test_the_warning_names_the_levels_and_the_likely_reason():
    assert timing_warning("sweep", [("C=1", stats(0.3, 0.05)), ("C=2", stats(1.9, 0.05))]) is None
    starved = timing_warning(
        "sweep", [("C=1", stats(2.4, 0.04)), ("C=1", stats(2.2, 0.03)), ("C=4", stats(1, 0.1))]
    )
    assert starved is not None
    assert starved.startswith(
        "sweep: the harness's timing error passed 2 ms in 2 of 3 level runs (C=1;"
    )
    assert "left without a CPU" in starved and "UNTRUSTED" in starved
    busy = timing_warning("sweep", [("C=256", stats(12, 0.95))])
    assert busy is not None and "workload.client_processes" in busy
