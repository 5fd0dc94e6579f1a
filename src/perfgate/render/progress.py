"""The wording of a measurement's progress lines: a level run starting and ending, a
failed request, a capacity search's searches and probes. The measuring loop says what
happened; these say it in words."""

from __future__ import annotations

from perfgate.client import RequestRecord
from perfgate.gate.values import level_name
from perfgate.measure.data import CapacitySearch, LevelData, Probe
from perfgate.profile.workload import CapacitySpec


def run_starts(
    name: str, level: int | float, word: str, number: int, requests: int, lengths: str, warmup: int
) -> str:
    """A level run starts: its requests, lengths and warmup."""
    return (
        f"perfgate: {name} {level_name(level)} {word} {number}: {requests} requests "
        f"({lengths}, {warmup} warmup)"
    )


def sequential_starts(name: str, requests: int, warmup: int) -> str:
    """Single requests start."""
    return f"perfgate: {name}: {requests} sequential requests a run, {warmup} warmup"


def live_label(name: str, level: int | float, word: str, number: int, phase: str) -> str:
    """The live display's label of a level run in progress."""
    return f"{name} {level_name(level)} {word} {number} {phase}"


def stopped(reason: str, then: str) -> str:
    """A measurement stops early (far below its baseline, or the server gone), and what
    that leaves out."""
    return f"perfgate: {reason}; {then}"


def near_limit(what: str, then: str) -> str:
    """A figure of ``what`` is undecided near its limit: ``then``, more is measured."""
    return f"perfgate: {what} near its limit; {then}"


def request_failed(record: RequestRecord) -> str:
    return f"perfgate:   request failed: {record.error}"


def level_ended(name: str, data: LevelData) -> str:
    """A level run ended: its tok/s, requests, wall time, and the harness's and the
    server's own readings over it."""
    m = data.metrics
    chunks = (
        f", {m.tokens_per_chunk:.2f} tokens per chunk"
        if m.tokens_per_chunk is not None and m.tokens_per_chunk > 1.005
        else ""
    )
    return (
        f"perfgate: {name} {level_name(data.level)}: {m.agg_tok_s:.1f} tok/s agg, "
        f"{m.per_request_tok_s.p50 or 0:.1f} tok/s per request (median), "
        f"ok {m.ok}, fail {m.fail}, wall {m.wall_s:.1f}s"
        + chunks
        + (f"; {data.harness.describe()}" if data.harness else "")
        + (f"; {data.server.describe()}" if data.server else "")
    )


def search_event(
    name: str,
    spec: CapacitySpec,
    what: str,
    search: CapacitySearch,
    number: int,
    probe: Probe | None,
) -> str:
    """A capacity search started ("search"), judged a probe ("probe") or ended ("found")."""
    if what == "search":
        return (
            f"perfgate: {name}: search {number}: the highest "
            f"{'request rate' if spec.by == 'rate' else 'concurrency'} from "
            f"{spec.low:g} to {spec.high:g} with slo_met >= {spec.target:.2f}"
        )
    if what == "probe" and probe is not None:
        share = probe.goodput.met_share or 0.0
        return (
            f"perfgate: {name} {level_name(probe.level)}: slo_met {share:.2f} "
            f"{'>=' if probe.met else '<'} target {spec.target:.2f}"
        )
    return f"perfgate: {name}: search {number}: {search.describe()}"
