"""Client shards as Ray actors (``workload.client_ray``) on a real local Ray cluster,
against the simulator with exact timings; the clock joining on its own."""

from __future__ import annotations

import json
import time

import pytest

from perfgate.load.rayshards import RayLink, RayShardPool
from perfgate.load.shards import ShardPool
from perfgate.sim import SimConfig, SimProcess
from tests.helpers import TINY, floor_baselines, profile_toml, require_ray, run_pytest
from tests.sim_truth import check_against_the_server, run_one_level


@pytest.fixture(scope="module")
def ray_here():
    """A local Ray cluster on this host (2 CPUs: two shard actors)."""
    require_ray()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_ray_actor_shards_measure_what_one_process_measures_on_the_same_server(ray_here):
    """One simulated server (TTFT 50 ms, ITL 4 ms), one level of C=8 run by one client
    process and then by two Ray actors: the actors' records, joined on this process's
    clock, give the server's own figures within the harness's bound, as one process's do."""
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.004)) as sim:
        one, one_written = run_one_level(sim, processes=1)
        actors, actors_written = run_one_level(
            sim, processes=2, pool_for=lambda url: RayShardPool(url, "auto")
        )
    check_against_the_server(one, one_written, "1 client process")
    assert actors.harness is not None and actors.harness.processes == 2
    assert 0 < actors.harness.clock_error_s < 0.005  # the clocks were read, over Ray
    check_against_the_server(actors, actors_written, "2 Ray actors")


class _Method:
    def __init__(self, call):
        self.call = call

    def remote(self, *args):
        return self.call(*args)  # a coroutine: awaited as a Ray ObjectRef would be


class SkewedActor:
    """A shard on a host whose clock runs 1000 s ahead of ours (in-process stand-in for a
    remote Ray actor: a real ShardRunner, its timestamps moved to that clock)."""

    SKEW = 1000.0

    def __init__(self, base_url):
        from perfgate.load.rayshards import ShardActor

        self.shard = ShardActor(base_url)
        self.now = _Method(self._now)
        self.tally = _Method(self.shard.tally)
        self.warm = _Method(self._warm)
        self.open = _Method(self.shard.open)
        self.go = _Method(self._go)
        self.stop = _Method(self.shard.stop)

    async def _now(self):
        return time.perf_counter() + self.SKEW

    def _skewed(self, record):
        record.start, record.end = record.start + self.SKEW, record.end + self.SKEW
        record.sent += self.SKEW
        record.token_times = [t + self.SKEW for t in record.token_times]
        return record

    async def _warm(self, job):
        return [self._skewed(r) for r in await self.shard.warm(job)]

    async def _go(self):
        records, harness, hit = await self.shard.go()
        return [self._skewed(r) for r in records], harness, hit


class SkewedPool(ShardPool):
    def new_link(self):
        link = RayLink(SkewedActor(self.base_url))
        link.close = lambda: None
        return link


def test_shards_on_a_clock_1000_s_ahead_are_joined_onto_ours():
    """Two shards whose timestamps come on a clock 1000 s ahead (stand-ins for actors on
    other hosts): once joined, the level's figures are the server's own, as one
    process's are."""
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.004)) as sim:
        level, written = run_one_level(sim, processes=2, pool_for=SkewedPool)
    assert level.harness is not None and level.harness.processes == 2
    assert level.harness.clock_error_s > 0
    check_against_the_server(level, written, "2 shards on a skewed clock")


def test_a_perf_run_sends_its_load_from_ray_actors(ray_here, tmp_path):
    """`pytest -m perf` as users run it, on the real llama.cpp server, with the profile's
    client shards on the Ray cluster (`client_ray`, 2 client processes): the C=2 level's
    load came from two actors, their clocks joined onto the run's, and the gate judged it."""
    address = ray_here.get_runtime_context().gcs_address
    profile = profile_toml(
        {**TINY, "seed = 0\n": f'seed = 0\nclient_processes = 2\nclient_ray = "{address}"\n'},
        tmp_path,
        "tiny",
    )
    result = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        "-k",
        "sweep",
        f"--perf-profile={profile}",
        floor_baselines(profile),
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    run = json.loads(sorted((tmp_path / "out" / "runs").glob("*.json"))[-1].read_text())
    levels = {lv["concurrency"]: lv for lv in run["measurements"]["sweep"]["levels"]}
    assert levels[1]["harness"]["processes"] == 1  # C=1 stays in-process
    assert levels[2]["harness"]["processes"] == 2, levels[2]["harness"]
    assert levels[2]["harness"]["clock_error_s"] > 0  # joined from actors' clocks
    assert levels[2]["metrics"]["ok"] >= 2 and levels[2]["metrics"]["fail"] == 0
    assert "in 2 processes (clocks joined within" in out


def test_more_actors_than_the_cluster_has_cpus_is_a_clear_error(ray_here):
    """Three shards on a 2-CPU cluster: the third is never placed; the level fails with
    what to do instead of waiting for ever."""
    from perfgate.errors import PerfgateError

    what_to_do = r"lower workload\.client_processes, or add nodes"
    with (
        SimProcess(SimConfig(ttft_s=0.05, itl_s=0.004)) as sim,
        pytest.raises(PerfgateError, match=what_to_do),
    ):
        run_one_level(
            sim, processes=3, pool_for=lambda url: RayShardPool(url, "auto", place_timeout_s=5)
        )
