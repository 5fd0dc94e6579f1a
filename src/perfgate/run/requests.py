"""What each measured request sends, its prompts, and the checks on what came back."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from perfgate.diagnose.observe import short_outputs
from perfgate.gate.values import level_name
from perfgate.load.level import Tally
from perfgate.load.rayshards import RayShardPool
from perfgate.load.shards import ShardPool
from perfgate.load.sweep import Decision
from perfgate.load.workers import RequestPlan
from perfgate.measure.data import LevelData, Measurement
from perfgate.run.state import BEHIND_SCHEDULE_S, SessionState
from perfgate.workload.prompts import Prompt


class RequestChecks(SessionState):
    """The request plan and prompts of a level run, and the checks on its results."""

    # -- measuring ---------------------------------------------------------------------
    def plan(self) -> RequestPlan:
        """What each measured request sends."""
        w = self.profile.workload
        return RequestPlan(
            api=w.api,
            model=self.profile.model.name,
            output_len=w.output_len,
            request_timeout_s=self.profile.timeouts.request_s,
            extras={
                "temperature": 0,
                **self.completion_extras,
                **self.profile.server.request_fields,
            },
            reasoning_fields=self.engine.reasoning_fields,
            headers=self.headers,
        )

    def prompts(self, name: str, concurrency: int | float, repeat: int, count: int) -> list[Prompt]:
        """``count`` seeded prompts for run ``repeat`` of test ``name``'s level ``concurrency``
        (starting the backend: its tokenizer counts them)."""
        backend = self.start_backend()
        return self.prompt_source.draw(
            backend.base_url, name, concurrency, repeat, count, headers=backend.headers
        )

    def shard_pool_for(self) -> Callable[[str], ShardPool]:
        """The sweep's client shards: processes on this host, or Ray actors over the
        cluster the profile names (``workload.client_ray``)."""
        address = self.profile.workload.client_ray
        if address is None:
            return ShardPool
        return lambda base_url: RayShardPool(base_url, address)

    def _check_output_lengths(self, data: LevelData) -> None:
        forced = "ignore_eos" in self.completion_extras
        if forced:
            return  # short outputs fail their requests (RequestPlan.output_problem)
        w = self.profile.workload
        if not self.prompt_source.kind.one_length(w):
            return  # lengths vary by request: no one length to compare with
        if why := short_outputs(data.metrics, w.output_len, forced):
            self.degraded(why)

    def _check_schedule(self, name: str, data: LevelData) -> None:
        """Say when an open-loop level's requests left the client late (p99 of the wait
        from their scheduled time past :data:`BEHIND_SCHEDULE_S`), and why: the cap on
        requests in flight was full, or the client itself lagged."""
        wait = data.metrics.client_delay_s
        if wait.p99 is None or wait.p99 <= BEHIND_SCHEDULE_S:
            return
        cap = self.profile.workload.max_in_flight
        if cap is not None:
            why = f"all {cap} requests in flight allowed (workload.max_in_flight) were busy"
        else:
            why = "the client could not send on time" + (
                f" ({data.harness.describe()})" if data.harness else ""
            )
        self.degraded(
            f"{name} {level_name(data.level)}: the client fell behind its schedule: requests "
            f"left up to {(wait.p99 or 0) * 1000:.0f} ms (p99; mean {(wait.mean or 0) * 1000:.0f}"
            f" ms) after their scheduled time; {why}. That wait is in their TTFT and latency, "
            "which count from the scheduled time"
        )

    def _lengths_text(self) -> str:
        """The workload's lengths in words, e.g. '128 in / 64 out tokens'."""
        return self.prompt_source.kind.lengths(self.profile.workload)

    def _rate(self, tally: Tally) -> str:
        """The phase's rate so far: tokens a second where every request streams exactly
        output_len (forced, one length), else requests a second."""
        elapsed = time.perf_counter() - tally.started
        if elapsed <= 0 or not tally.done:
            return ""
        w = self.profile.workload
        if "ignore_eos" in self.completion_extras and self.prompt_source.kind.one_length(w):
            return f"≈{tally.done * w.output_len / elapsed:.0f} tok/s"
        return f"{tally.done / elapsed:.2f} req/s"

    def after_run(
        self,
        name: str,
        measurement: Measurement,
        done: Sequence[LevelData],
        stopping: str,
        again: str,
    ) -> Decision:
        """After a run of a level (``done``: its runs so far): stop the measurement when
        its first run is far below the baseline (early abort, saying ``stopping``), measure
        the level again while a figure is undecided (saying ``again`` once the minimum
        runs are done), else go on."""
        policy = self.policy
        if len(done) == 1 and (reason := policy.abort_reason(name, done[0], self.baseline)):
            measurement.aborted = reason
            self.progress(f"perfgate: {reason}; {stopping}")
            return "stop"
        first = [d for d in measurement.levels if d.level == 1]
        step = policy.after_level(name, done, self.baseline, first)
        if step == "repeat" and len(done) >= policy.min_runs:
            self.progress(f"perfgate: {again}")
        return step
