"""Load generation on a mock transport: concurrency, warmup, deadlines, early stop, pooling."""

import asyncio
import itertools
import os
import statistics

import httpx
import pytest

from perfgate.load.level import run_level
from perfgate.load.shards import ShardPool
from perfgate.load.sweep import run_sweep
from perfgate.load.workers import HttpxWorkers, RequestPlan
from perfgate.sim import SimConfig, SimProcess
from perfgate.workload.prompts import Prompt
from tests.scripted import completion_chunk, sse, usage_chunk
from tests.sim_truth import check_against_the_server, run_one_level

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
            HttpxWorkers(lambda: c),
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
            HttpxWorkers(lambda: c),
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


def test_sweep_runs_levels_in_order_and_can_stop_early():
    """On the simulator (a real local server): levels in order, each worker on its own
    connection, kept across levels."""
    with SimProcess(SimConfig(ttft_s=0.001, itl_s=0.001)) as sim:
        sweep = asyncio.run(
            run_sweep(
                sim.base_url,
                PLAN,
                [1, 2, 4, 8],
                lambda c, repeat: prompts(3 * c),
                warmup=0,
                level_timeout_s=30,
                after_level=lambda c, runs: "next" if c < 2 else "stop",
            )
        )
        truth = sim.records()
    assert [lv.concurrency for lv in sweep.levels] == [1, 2]
    assert sweep.not_run == [4, 8]
    assert all(r.ok for lv in sweep.levels for r in lv.records)
    assert len(truth) == 3 + 6
    # worker 0 kept its connection from C=1 to C=2; worker 1 opened one: 2 in all
    assert len({t.connection for t in truth}) == 2


def test_sweep_repeats_a_level_when_asked():
    asked = []

    def after(c, runs):
        asked.append((c, len(runs)))
        return "repeat" if len(runs) < 3 else "next"

    with SimProcess(SimConfig(ttft_s=0.001, itl_s=0.001)) as sim:
        sweep = asyncio.run(
            run_sweep(
                sim.base_url,
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


def test_a_sweep_spreads_its_workers_over_client_processes_on_one_clock():
    """Two client processes share each level: every worker its own connection, all of
    a level's requests in flight at the server at once, records merged in index order."""
    with SimProcess(SimConfig(ttft_s=0.02, itl_s=0.002)) as sim:
        sweep = asyncio.run(
            run_sweep(
                sim.base_url,
                PLAN,
                [1, 8],
                lambda c, repeat: prompts(1 + 2 * c),
                warmup=1,
                level_timeout_s=30,
                processes=2,
            )
        )
        truth = sim.records()
    one, eight = sweep.levels
    assert one.harness is not None and one.harness.processes == 1  # C=1 stays in-process
    assert eight.harness is not None and eight.harness.processes == 2
    assert [r.index for r in eight.records] == list(range(16)) and all(r.ok for r in eight.records)
    assert len(eight.warmup_records) == 1
    assert all(eight.start <= r.start for r in eight.records)  # one clock for both
    measured = [t for t in truth if t.arrival >= eight.start]
    events = sorted([(t.arrival, 1) for t in measured] + [(t.end, -1) for t in measured])
    assert max(itertools.accumulate(step for _, step in events)) == 8


def test_more_client_processes_only_once_one_could_not_keep_up():
    from perfgate.load.sweep import client_processes
    from tests.synthetic import harness_stats as stats

    assert client_processes(1, stats(0.1, 0.3), limit=4) == 1  # keeping up
    assert client_processes(1, stats(0.1, 0.8), limit=4) == 2  # CPU near one core
    assert client_processes(1, stats(5.0, 0.3), limit=4) == 2  # the loop lagged
    assert client_processes(2, stats(0.1, 1.0, processes=2), limit=4) == 2  # 50% each
    assert client_processes(2, stats(0.1, 1.5, processes=2), limit=4) == 4
    assert client_processes(4, stats(9.0, 3.9, processes=4), limit=4) == 4  # at the limit
    assert client_processes(1, None, limit=4) == 1


def test_client_processes_measure_what_one_process_measures_on_the_same_server():
    """One simulated server with exact timings (TTFT 50 ms, ITL 4 ms), one level of C=8 run
    by one client process and then by two: every figure of the merged records is the
    server's own (its write times) within the harness's timing error bound, as one
    process's are."""
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.004)) as sim:
        runs = {n: run_one_level(sim, processes=n) for n in (1, 2)}
    for processes, (level, written) in runs.items():
        assert level.harness is not None and level.harness.processes == processes
        check_against_the_server(level, written, f"{processes} client processes")


FREE = 1.8  # cores' worth two busy processes get when a host's two cores are both free
BEYOND_ONE_CORE = 1.2  # two processes' tok/s over what one reads per CPU second


def test_two_client_processes_read_what_one_process_cannot_from_a_server_that_costs_little():
    """A simulator in burst mode writes each 50,000-token answer whole (0.1-0.2 µs of its
    CPU a token), so one client process, parsing every chunk, is the limit: it uses a whole
    core. What one process can read is its tokens per CPU second (a whole core; time stolen
    by other tenants is not counted), the median of its runs. Two client processes read
    BEYOND_ONE_CORE times that or more in wall-clock time, which one process cannot on a
    core. Every request is answered in full, and the merged records count exactly the
    tokens the server wrote.

    Two processes need a second core. A shared host's other tenants can hold it for minutes,
    so it is measured (``free_cores``) just before and after each two-process run. Up to
    five alternations of one process and two, stopping once shown; a failure counts only
    from runs that had both cores, and a host that never gave them skips with the figures."""
    from tests.cores import free_cores

    output_len, concurrency, waves = 50_000, 4, 4
    plan = RequestPlan(api="completions", model="m", output_len=output_len, request_timeout_s=120)
    rates: dict[int, list[float]] = {1: [], 2: []}
    per_core: list[float] = []  # one process: tokens per CPU second
    cores_around_two: list[tuple[float, float]] = []  # free cores before and after each
    busiest_single = 0.0

    def shown() -> bool:
        return bool(rates[2]) and max(rates[2]) >= BEYOND_ONE_CORE * statistics.median(per_core)

    with SimProcess(SimConfig(ttft_s=0.01, itl_s=0.0, burst=True)) as sim:
        for processes in (1, 2) * 5:
            before = free_cores() if processes == 2 else 0.0
            sweep = asyncio.run(
                run_sweep(
                    sim.base_url,
                    plan,
                    [concurrency],
                    lambda c, repeat: prompts(waves * c),
                    warmup=0,
                    level_timeout_s=120,
                    processes=processes,
                )
            )
            level, harness = sweep.levels[0], sweep.levels[0].harness
            assert harness is not None and harness.processes == processes
            assert all(r.ok and r.output_tokens == output_len for r in level.records)
            served = [t for t in sim.records() if t.arrival >= level.start]
            tokens = output_len * len(level.records)
            assert sum(sum(t.tokens) for t in served) == tokens
            rates[processes].append(tokens / harness.wall_s)
            if processes == 1:
                busiest_single = max(busiest_single, harness.cpu_s / harness.wall_s)
                per_core.append(tokens / harness.cpu_s)
            else:
                cores_around_two.append((before, free_cores()))
            sim.reset()
            if shown():
                break
    evidence = (
        f"tok/s by client processes: {rates}; one process's tok/s per CPU second: {per_core}; "
        f"one process's CPU at most {busiest_single:.0%} of a core; free cores before and "
        f"after each two-process run: {cores_around_two}"
    )
    if not shown() and not any(min(pair) >= FREE for pair in cores_around_two):
        pytest.skip(f"this host never gave two free cores ({FREE}+ measured): {evidence}")
    assert busiest_single >= 0.8, f"one process was not the limit: {evidence}"
    assert shown(), evidence


class TwoShardPool(ShardPool):
    """Client processes on this host, up to two (2-core hosts allow one: cores less one)."""

    def max_shards(self) -> int:
        return 2


def test_auto_adds_a_client_process_once_one_could_not_keep_up_and_not_before():
    """``processes="auto"`` on real levels: a first level that keeps one client process
    busy past BUSY_SHARE of a core (50,000-token answers written whole) runs its next level
    over two processes; a calm first level (a token every 10 ms) keeps one."""
    from perfgate.load.sweep import BUSY_SHARE

    def sweep(config: SimConfig, output_len: int):
        plan = RequestPlan(
            api="completions", model="m", output_len=output_len, request_timeout_s=120
        )
        with SimProcess(config) as sim:
            return asyncio.run(
                run_sweep(
                    sim.base_url,
                    plan,
                    [4, 4],
                    lambda c, repeat: prompts(4 * c),
                    warmup=0,
                    level_timeout_s=120,
                    processes="auto",
                    pool_for=TwoShardPool,
                )
            ).levels

    busy = sweep(SimConfig(ttft_s=0.01, itl_s=0.0, burst=True), 50_000)
    calm = sweep(SimConfig(ttft_s=0.01, itl_s=0.01), 20)
    harnesses = [level.harness for level in (*busy, *calm)]
    assert all(h is not None for h in harnesses)
    evidence = "; ".join(h.describe() for h in harnesses if h is not None)
    first, second = busy[0].harness, busy[1].harness
    assert first is not None and second is not None
    assert first.processes == 1 and first.cpu_share > BUSY_SHARE, evidence
    assert second.processes == 2, evidence
    calm_first, calm_second = calm[0].harness, calm[1].harness
    assert calm_first is not None and calm_second is not None
    assert calm_first.processes == 1 and calm_first.cpu_share < BUSY_SHARE, evidence
    # a calm level's loop still lags on a host whose other tenants take the core: only then
    assert calm_second.processes == (2 if calm_first.over_bound else 1), evidence


MANY_CORES = 12  # one client process, four, and a simulator over six processes


@pytest.mark.skipif(
    (os.cpu_count() or 1) < MANY_CORES,
    reason=f"needs {MANY_CORES}+ cores: four client processes and a simulator fast enough to "
    "outrun one client process (on 2 cores the simulator costs more a token than the client: "
    "benchmarks/harness_fidelity.py)",
)
def test_client_processes_stream_past_what_one_process_can_read():
    """512 streams at 2 ms ITL ask 256k tok/s of a simulator spread over 6 processes. One
    client process reads what a whole core can; four read half as much again or more, and
    what they read is what the server wrote, at its rate, within the harness's bound."""
    from perfgate.client.monitor import LAG_BOUND_S

    concurrency = 512
    plan = RequestPlan(api="completions", model="m", output_len=200, request_timeout_s=120)
    levels = {}
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.002), workers=6) as sim:
        for processes in (1, 4):
            sweep = asyncio.run(
                run_sweep(
                    sim.base_url,
                    plan,
                    [concurrency],
                    lambda c, repeat: prompts(2 * c),
                    warmup=0,
                    level_timeout_s=120,
                    processes=processes,
                )
            )
            level = sweep.levels[0]
            served = [t for t in sim.records() if t.arrival >= level.start]
            written = sum(sum(t.tokens) for t in served)
            last = max(t.written[-1] for t in served)
            levels[processes] = (level, written / (last - level.start))
            sim.reset()
    rates = {}
    for processes, (level, server_rate) in levels.items():
        assert level.harness is not None and level.harness.processes == processes
        assert all(r.ok for r in level.records), processes
        rates[processes] = sum(r.output_tokens for r in level.records) / level.harness.wall_s
        evidence = f"{processes} process(es): {level.harness.describe()}, {rates}"
        assert abs(rates[processes] - server_rate) <= 0.05 * server_rate, evidence
    one, four = levels[1][0].harness, levels[4][0].harness
    assert one is not None and four is not None
    assert one.cpu_s >= 0.8 * one.wall_s, f"one process was not the limit: {one.describe()}"
    assert rates[4] >= 1.5 * rates[1], rates
    assert four.loop_lag_p99_s <= LAG_BOUND_S, four.describe()
