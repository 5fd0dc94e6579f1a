"""Load generation on a mock transport: concurrency, warmup, deadlines, early stop, pooling."""

import asyncio

import httpx
import pytest

from perfgate.load import RequestPlan, WorkerClients, run_level, run_sweep
from perfgate.workload import Prompt
from tests.scripted import completion_chunk, sse, usage_chunk

PLAN = RequestPlan(api="completions", model="m", output_len=2, request_timeout_s=5.0)


class SlowStream(httpx.AsyncByteStream):
    def __init__(self, tracker, delay):
        self.tracker = tracker
        self.delay = delay

    async def __aiter__(self):
        self.tracker["live"] += 1
        self.tracker["peak"] = max(self.tracker["peak"], self.tracker["live"])
        await asyncio.sleep(self.delay)
        yield completion_chunk("a")
        yield completion_chunk("b", finish="length")
        yield usage_chunk(4, 2)
        self.tracker["live"] -= 1  # the request is complete once its last event is out
        yield sse("[DONE]")


def client(tracker, delay=0.02):
    def handler(request):
        if request.method == "GET":  # opening a pooled connection before the measured phase
            tracker["connects"].append(len(tracker["requests"]))
            return httpx.Response(200, json={"data": []})
        tracker["requests"].append(request.read())
        return httpx.Response(200, stream=SlowStream(tracker, delay))

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://t")


def tracker():
    return {"live": 0, "peak": 0, "requests": [], "connects": []}


def prompts(n):
    return [Prompt(text=f"p{i}", tokens=2) for i in range(n)]


@pytest.mark.asyncio
@pytest.mark.parametrize("concurrency", [1, 3, 8])
async def test_level_holds_concurrency_and_excludes_warmup(concurrency):
    t = tracker()
    async with client(t) as c:
        level = await run_level(
            WorkerClients(lambda: c),
            PLAN,
            prompts(2 + 3 * concurrency),
            concurrency=concurrency,
            warmup=2,
            level_timeout_s=30,
        )
    assert t["peak"] == concurrency
    assert len(level.warmup_records) == 2 and len(level.records) == 3 * concurrency
    assert all(r.ok for r in level.records)
    assert level.start >= max(r.end for r in level.warmup_records)
    assert level.wall_s > 0
    assert len(t["requests"]) == 2 + 3 * concurrency
    # one connection per request in flight is opened after the warmup, before the clock
    assert t["connects"] == [2] * concurrency
    assert level.harness is not None and level.harness.ticks >= 0


@pytest.mark.asyncio
async def test_level_deadline_marks_unstarted_requests_as_not_run():
    t = tracker()
    async with client(t, delay=0.3) as c:
        level = await run_level(
            WorkerClients(lambda: c),
            PLAN,
            prompts(10),
            concurrency=1,
            warmup=0,
            level_timeout_s=0.5,
        )
    assert level.deadline_hit
    errors = [r.error for r in level.records if not r.ok]
    assert len(level.records) == 10
    assert any("deadline" in e for e in errors)
    assert sum(r.ok for r in level.records) <= 2


def test_sweep_runs_levels_in_order_and_can_stop_early(monkeypatch):
    t = tracker()
    seen_levels = []

    def fake_pool(base_url, max_connections, timeout_s):
        seen_levels.append(("pool", max_connections))
        return client(t)

    monkeypatch.setattr("perfgate.load.pooled_client", fake_pool)
    sweep = asyncio.run(
        run_sweep(
            "http://t",
            PLAN,
            [1, 2, 4, 8],
            lambda c, repeat: prompts(c),
            warmup=0,
            level_timeout_s=30,
            after_level=lambda c, runs: "next" if c < 2 else "stop",
        )
    )
    assert [lv.concurrency for lv in sweep.levels] == [1, 2]
    assert sweep.not_run == [4, 8]
    # one client (one connection) per worker, made as levels need them, kept across levels
    assert seen_levels == [("pool", 1), ("pool", 1)]


def test_sweep_repeats_a_level_when_asked(monkeypatch):
    t = tracker()
    monkeypatch.setattr("perfgate.load.pooled_client", lambda *a: client(t))
    asked = []

    def after(c, runs):
        asked.append((c, len(runs)))
        return "repeat" if len(runs) < 3 else "next"

    sweep = asyncio.run(
        run_sweep(
            "http://t",
            PLAN,
            [1, 2],
            lambda c, r: prompts(c),
            warmup=0,
            level_timeout_s=30,
            after_level=after,
        )
    )
    assert [lv.concurrency for lv in sweep.levels] == [1, 1, 1, 2, 2, 2]
    assert asked == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
