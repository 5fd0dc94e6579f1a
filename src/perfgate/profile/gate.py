"""How figures are judged against the baseline, and what a fleet node needs."""

from __future__ import annotations

from pydantic import Field, field_validator

from perfgate.profile.base import Strict


class FleetSpec(Strict):
    """Where ``perfgate fleet`` may run this profile on a Ray cluster (docs/fleet.md)."""

    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Ray custom resources the node must offer, naming its hardware (e.g. "
        '{ "h200" = 1 }).',
    )
    num_gpus: float = Field(0, ge=0, description="GPUs the gate holds on its node.")
    num_cpus: float = Field(1, ge=0, description="CPUs the gate holds on its node.")

    @field_validator("resources")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        if bad := [k for k, v in value.items() if v <= 0]:
            raise ValueError(f"resource amounts must be above 0: {', '.join(bad)}")
        return value


class GateSpec(Strict):
    """How figures are judged against the baseline (docs/verdicts.md)."""

    repeats: int = Field(
        3,
        ge=1,
        description="Runs of each level before the usual verdict (--perf-repeats); fewer "
        "(min_repeats) when the runs agree far inside their limits.",
    )
    min_repeats: int = Field(
        2,
        ge=1,
        description="The fewest runs of a level that may pass when they agree far inside "
        "their limits (a sequential design's early look, sized so a figure at its limit "
        "passes there at most 1% of the time); set it to repeats to never stop early.",
    )
    max_extra_repeats: int = Field(
        7, ge=0, description="Extra runs of a level whose figures are near their limit."
    )
    record_repeats: int = Field(
        8,
        ge=3,
        description="Runs of each level when recording a baseline: the run-to-run noise "
        "that tolerances are derived from is measured over them.",
    )
    abort_below: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Stop the sweep at once when a level's tok/s is below "
        "this fraction of its baseline (0 disables early abort; --perf-abort-below).",
    )
    false_failure_rate: float = Field(
        0.01,
        gt=0,
        lt=0.5,
        description="Family-wise: the chance that noise alone fails any figure of the profile.",
    )
    min_tolerance: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Floor of every tolerance recording derives from noise: for hosts whose "
        "noise over days exceeds what back-to-back recorded runs show (shared CI machines).",
    )
    retired: list[str] = Field(
        default_factory=list,
        description="Baseline keys (glob patterns, e.g. 'sweep.c8.*') this profile no longer "
        "measures; every other baseline figure must be produced, or it fails as MISSING.",
    )
    figures: list[str] = Field(
        default_factory=list,
        description="Figures to gate besides the default ones, by name, e.g. ttft_p99_s, "
        "latency_p90_s, req_s (every name: docs/reference/figures.md).",
    )
    creep_runs: int | None = Field(
        None,
        ge=2,
        description="Slow-creep rule (off when unset): fail a figure that is within its "
        "tolerance but worse than its baseline by more than creep_margin in this many runs "
        "in a row (the run history's), against the same baseline value.",
    )
    creep_margin: float = Field(
        0.02,
        gt=0,
        lt=1,
        description="How much worse than the baseline (a fraction: 0.02 = 2%) a run's figure "
        "must be to count towards creep_runs.",
    )


class AbSpec(Strict):
    """A side-by-side run's settings (``perfgate ab A B``, ``--perf-ab A``: docs/upgrade.md),
    read from B's profile; the command-line flags override them."""

    tolerance: float = Field(
        0.10,
        gt=0,
        lt=1,
        description="How much worse B may be than A, figure by figure (0.1: 10% fewer tok/s "
        "or 10% more seconds; --tolerance, --perf-ab-tolerance).",
    )
    min_pairs: int = Field(
        8,
        ge=7,
        description="Pairs of runs (A and B) of a level before it may pass: whole A B B A "
        "blocks; 7 is the fewest a signed-rank bound at 99% needs.",
    )
    max_pairs: int = Field(
        200,
        ge=7,
        description="The most pairs of a level; a figure still undecided is TOO NOISY "
        "(--max-pairs, --perf-ab-max-pairs).",
    )
    colocate: bool = Field(
        True,
        description="Both servers up together, loaded one at a time (checked: the host's "
        "and each GPU's free memory with both up). false: A and B do not both fit, so "
        "whole server lifetimes alternate, A, B, A, ..., one more pair of runs a level "
        "each; it costs a server start a pair (--alternate, --perf-ab-alternate).",
    )
    rounds: int | None = Field(
        None,
        ge=1,
        description="Requests a run of a level, per request in flight, in the A/B runs "
        "(default: workload.rounds). Pairs, not long runs, beat drift: shorter runs "
        "reach min_pairs sooner.",
    )
    single_requests: int | None = Field(
        None,
        ge=1,
        description="Requests a single-request run in the A/B runs (default: "
        "workload.single_requests).",
    )
    warmup: int | None = Field(
        None,
        ge=0,
        description="Unmeasured requests before each A/B run of a level (default: "
        "workload.warmup). Each level's first run a side is a discarded warm-up run "
        "already, and an idle server's first request costs A and B alike: 0 saves a "
        "request a run.",
    )
