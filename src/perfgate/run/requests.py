"""What each measured request sends, and the checks on what a level run got back."""

from __future__ import annotations

import time

from perfgate.diagnose.observe import short_outputs
from perfgate.gate.values import level_name
from perfgate.load.level import Tally
from perfgate.load.workers import RequestPlan
from perfgate.measure.data import LevelData
from perfgate.profile import Profile
from perfgate.run.settings import BEHIND_SCHEDULE_S, RunSettings
from perfgate.workload.kinds import PromptKind, prompt_kind


def request_plan(settings: RunSettings, completion_extras: dict[str, object]) -> RequestPlan:
    """What each measured request sends: the workload's API and lengths, greedy, the
    engine's fields that force the output length (unless the prompt kind's answers end
    on their own), the prompt kind's fields (what each answer is judged against), the
    profile's own request fields."""
    profile, w = settings.profile, settings.profile.workload
    kind = prompt_kind(w.prompts)
    forcing = {} if kind.ends_on_its_own else completion_extras
    asked = kind.request_fields(w)
    return RequestPlan(
        api=w.api,
        model=profile.model.name,
        output_len=w.output_len,
        request_timeout_s=profile.timeouts.request_s,
        extras={"temperature": 0, **forcing, **asked, **profile.server.request_fields},
        reasoning_fields=settings.engine.reasoning_fields,
        headers=settings.headers,
    )


def short_output_problem(
    profile: Profile, kind: PromptKind, data: LevelData, forced: bool
) -> str | None:
    """Why a level run's outputs are shorter than the workload asks (None: they are not,
    or no one length applies: lengths vary by request, or forced ones fail requests)."""
    if forced:
        return None  # short outputs fail their requests (RequestPlan.output_problem)
    w = profile.workload
    if not kind.one_length(w):
        return None
    return short_outputs(data.metrics, w.output_len, forced)


def behind_schedule(profile: Profile, name: str, data: LevelData) -> str | None:
    """Why an open-loop level's requests left the client late (p99 of the wait from their
    scheduled time past :data:`BEHIND_SCHEDULE_S`): the cap on requests in flight was
    full, or the client itself lagged. None when they left on time."""
    wait = data.metrics.client_delay_s
    if wait.p99 is None or wait.p99 <= BEHIND_SCHEDULE_S:
        return None
    cap = profile.workload.max_in_flight
    if cap is not None:
        why = f"all {cap} requests in flight allowed (workload.max_in_flight) were busy"
    else:
        why = "the client could not send on time" + (
            f" ({data.harness.describe()})" if data.harness else ""
        )
    return (
        f"{name} {level_name(data.level)}: the client fell behind its schedule: requests "
        f"left up to {(wait.p99 or 0) * 1000:.0f} ms (p99; mean {(wait.mean or 0) * 1000:.0f}"
        f" ms) after their scheduled time; {why}. That wait is in their TTFT and latency, "
        "which count from the scheduled time"
    )


def rate_text(profile: Profile, kind: PromptKind, tally: Tally, forced: bool) -> str:
    """The phase's rate so far: tokens a second where every request streams exactly
    output_len (forced, one length), else requests a second."""
    elapsed = time.perf_counter() - tally.started
    if elapsed <= 0 or not tally.done:
        return ""
    w = profile.workload
    if forced and kind.one_length(w):
        return f"≈{tally.done * w.output_len / elapsed:.0f} tok/s"
    return f"{tally.done / elapsed:.2f} req/s"
