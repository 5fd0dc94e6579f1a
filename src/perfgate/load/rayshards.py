"""A level's load sharded over Ray actors, on the nodes of a Ray cluster.

``workload.client_ray = ADDRESS`` runs a sweep's client shards (:class:`ShardPool`) as
Ray actors spread over the cluster's nodes instead of processes on this host: each actor
runs its share of the level's workers on its own event loop and connections
(:class:`perfgate.load.sweep.ShardRunner`, the same code a client process runs). Hosts do not
share a monotonic clock, so before each level every actor's clock is read a few times
and the reading with the shortest round trip gives its offset (as NTP does); its records
are converted to this process's clock, and half that round trip is added to the level's
timing error bound (``harness.clock_error_s``). The server must be reachable from every
node (not a 127.0.0.1 address, unless the cluster is this host).

Ray is optional (``pip install 'perfgate[fleet]'``) and imported only when a profile
asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import MutableSequence, Sequence
from typing import Any

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats
from perfgate.errors import PerfgateError
from perfgate.load.shards import ShardJob, ShardLink, ShardPool, ShardRunner

CLOCK_READINGS = 8  # clock readings per actor before each level; the fastest one counts
PLACE_TIMEOUT_S = 60.0  # how long an actor may wait for a node with a free CPU
INSTALL_HINT = "pip install 'perfgate[fleet]' (Ray)"


def clock_offset(readings: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """(offset, error) of a remote clock from readings ``(ours before, theirs, ours
    after)``: theirs minus the midpoint of ours, from the reading with the shortest
    round trip; its error is at most half that round trip."""
    before, theirs, after = min(readings, key=lambda r: r[2] - r[0])
    return theirs - (before + after) / 2, (after - before) / 2


class ShardActor:
    """The body of a Ray actor (``ray.remote`` is applied where Ray is imported): one
    shard, on the actor's event loop."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.counts = [0, 0]
        self._runner: ShardRunner | None = None

    async def _ready(self) -> ShardRunner:
        if self._runner is None:
            self._runner = await ShardRunner(self.base_url, self.counts).__aenter__()
        return self._runner

    async def now(self) -> float:
        return time.perf_counter()

    async def tally(self) -> list[int]:
        return list(self.counts)

    async def warm(self, job: ShardJob) -> list[RequestRecord]:
        return await (await self._ready()).warm(job)

    async def open(self) -> None:
        await (await self._ready()).open()

    async def go(self) -> tuple[list[RequestRecord], HarnessStats, bool]:
        return await (await self._ready()).go()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.__aexit__(None, None, None)
            self._runner = None


class RayLink:
    """The main process's handle on one shard actor."""

    def __init__(self, actor: Any, place_timeout_s: float = PLACE_TIMEOUT_S) -> None:
        self._actor = actor
        self.place_timeout_s = place_timeout_s
        self._placed = False
        self.counts: MutableSequence[int] = [0, 0]
        self.clock_error_s = 0.0
        self._offset_s = 0.0

    async def sync_clock(self) -> None:
        try:  # the first reading waits for Ray to place the actor
            await asyncio.wait_for(self._actor.now.remote(), self.place_timeout_s)
            self._placed = True
        except TimeoutError:
            raise PerfgateError(
                f"Ray placed no client shard actor within {self.place_timeout_s:g} s (each "
                "needs 1 free CPU on a node): lower workload.client_processes, or add nodes"
            ) from None
        readings = []
        for _ in range(CLOCK_READINGS):
            before = time.perf_counter()
            theirs = await self._actor.now.remote()
            readings.append((before, theirs, time.perf_counter()))
        self._offset_s, self.clock_error_s = clock_offset(readings)

    def to_our_clock(self, t: float) -> float:
        return t - self._offset_s

    async def refresh_counts(self) -> None:
        self.counts[:] = await self._actor.tally.remote()

    async def warm(self, job: ShardJob) -> list[RequestRecord]:
        return await self._actor.warm.remote(job)  # type: ignore[no-any-return]

    async def open(self) -> None:
        await self._actor.open.remote()

    async def go(self) -> tuple[list[RequestRecord], HarnessStats, bool]:
        return await self._actor.go.remote()  # type: ignore[no-any-return]

    def close(self) -> None:
        import ray

        if self._placed:  # an actor never placed, or dead, has nothing to stop
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(self._actor.stop.remote(), timeout=10)
        with contextlib.suppress(ray.exceptions.RayError):
            ray.kill(self._actor)


class RayShardPool(ShardPool):
    """Shards as Ray actors (one CPU each), spread over the cluster at ``address``."""

    def __init__(
        self, base_url: str, address: str, place_timeout_s: float = PLACE_TIMEOUT_S
    ) -> None:
        super().__init__(base_url)
        self.place_timeout_s = place_timeout_s
        try:
            import ray
        except ImportError:
            raise PerfgateError(f"workload.client_ray needs Ray: {INSTALL_HINT}") from None
        self._ray = ray
        self._joined = not ray.is_initialized()
        if self._joined:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        self._actor = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(ShardActor)

    def max_shards(self) -> int:
        """The cluster's CPUs."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def new_link(self) -> ShardLink:
        return RayLink(self._actor.remote(self.base_url), self.place_timeout_s)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._joined:
                self._ray.shutdown()
