"""The paired rows of the gate study: the real paired verdict replayed on simulated A/B runs.

Each trial is one side-by-side build: ``levels`` levels of 4 figures (aggregate and
per-request tok/s and acceptance, higher is better; TTFT, lower is better). Each level
runs ABBA blocks (A B B A ...) and is judged after every block by
:func:`perfgate.stats.paired.decide_paired`, figure by figure, until every figure is
decided or the level reaches ``max_pairs``. A decided figure keeps its verdict.

Each run's figure is its true value times:

- the host's speed at that run: steady (a drift of ``STEADY_DRIFT`` a run, in one
  direction for the whole build), or a step (the host slows by ``STEP`` between the A and
  the B of a pair in the middle of each level's first blocks, and stays slow), or none;
- the run's own lognormal noise (sd ``cv`` of ln, independent for every figure: the worst
  case for the family-wise rate);
- on B only, the regression: every tok/s figure times ``1 - r`` and TTFT over it (a slower
  build), or that on one figure only.

    python benchmarks/gate_study.py --paired-only    # these rows (part of the whole study)
    python benchmarks/paired_study.py --quick        # the same, fewer trials
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from perfgate.stats.estimate import Direction
from perfgate.stats.paired import PairedRule, Pairs, decide_paired, far_worse

FIGURES: tuple[tuple[str, Direction, bool], ...] = (
    ("agg_tok_s", "higher", True),
    ("per_request_tok_s", "higher", True),
    ("ttft_s", "lower", False),
    ("accept_rate", "higher", False),
)
STEADY_DRIFT = 0.005  # the host 0.5% slower every run (20% over a level of 40 runs)
STEP = 0.30  # the host slows 30% once
LEVELS = 3  # 12 figures: the embedded default's size


@dataclass(frozen=True)
class Setting:
    cv: float
    regression: float  # how much slower B is (0: as good as A)
    drift: str  # "none", "steady" or "step"
    everywhere: bool  # every tok/s and TTFT figure slower; else per_request_tok_s at C=1


def rule_for(levels: int) -> PairedRule:
    """The shipped paired rule, its family the figures of ``levels`` levels."""
    return PairedRule(figures=levels * len(FIGURES))


def host_speed(run: int, drift: str, step_at: int) -> float:
    if drift == "steady":
        return math.exp(-STEADY_DRIFT * run)
    if drift == "step":
        return 1.0 - STEP if run >= step_at else 1.0
    return 1.0


def run_level(
    rng: random.Random, setting: Setting, rule: PairedRule, level: int
) -> tuple[dict[str, str], int]:
    """One level's ABBA runs until every figure is decided: each figure's verdict, and
    the pairs it took."""
    a: dict[str, list[float]] = {name: [] for name, _, _ in FIGURES}
    b: dict[str, list[float]] = {name: [] for name, _, _ in FIGURES}
    verdicts: dict[str, str] = {}
    step_at = 2 * (rule.min_pairs // 2) + 1  # inside a pair, in the level's first blocks
    run = 0
    while True:
        for side in "ABBA":
            speed = host_speed(run, setting.drift, step_at)
            run += 1
            for name, direction, _ in FIGURES:
                slowed = setting.everywhere and name != "accept_rate"
                slowed = slowed or (not setting.everywhere and name == "per_request_tok_s"
                                    and level == 1)  # fmt: skip
                factor = 1 - setting.regression if side == "B" and slowed else 1.0
                # a slower host or build: fewer tok/s, more seconds
                good = speed * factor if direction == "higher" else 1 / (speed * factor)
                value = good * math.exp(rng.gauss(0.0, setting.cv))
                (a if side == "A" else b)[name].append(value)
        for name, direction, may_abort in FIGURES:
            if name in verdicts:
                continue
            pairs = Pairs.of(a[name], b[name], direction, rule.tolerance, may_abort=may_abort)
            decision = decide_paired(pairs, rule)
            if decision.step == "done":
                verdicts[name] = decision.verdict
            if far_worse(pairs, rule):  # the run stops at once, as an A/B run does
                return {**{n: "not-run" for n, _, _ in FIGURES}, **verdicts}, pairs.n
        if len(verdicts) == len(FIGURES):
            return verdicts, len(a["agg_tok_s"])


def trial(args: tuple[int, Setting, int, PairedRule]) -> tuple[bool, bool, bool, int]:
    """One A/B build: (failed, the regressed figure caught, ended REGRESSED anywhere,
    pairs of the C=1 level)."""
    seed, setting, levels, rule = args
    rng = random.Random(seed)
    failed = caught = regressed = False
    first_pairs = 0
    for level in range(1, levels + 1):
        verdicts, pairs = run_level(rng, setting, rule, level)
        if level == 1:
            first_pairs = pairs
        stopped = "not-run" in verdicts.values()
        bad = {k for k, v in verdicts.items() if v not in ("pass", "improved")}
        failed |= bool(bad)
        regressed |= any(v == "regressed" for v in verdicts.values())
        if setting.everywhere:
            caught |= bool(bad - {"accept_rate"})
        elif level == 1:
            caught |= "per_request_tok_s" in bad
        if stopped:
            break
    return failed, caught, regressed, first_pairs


def rows(pool: ProcessPoolExecutor, trials_null: int, trials_hit: int, levels: int = LEVELS,
         rule: PairedRule | None = None) -> None:  # fmt: skip
    rule = rule or rule_for(levels)
    print(
        f"paired design (A and B interleaved A B B A on one host); tolerance "
        f"{rule.tolerance:.0%}, {rule.min_pairs}..{rule.max_pairs} pairs a level, "
        f"{levels * len(FIGURES)} figures, family-wise rate {rule.false_failure_rate:.0%}"
    )
    print("| run noise CV | host drift | B | trials | builds failed | regressed figure caught "
          "| ended REGRESSED | pairs at C=1 (median) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    settings = [Setting(cv, 0.0, drift, True) for cv in (0.05, 0.15, 0.30)
                for drift in ("none", "steady", "step")]  # fmt: skip
    settings += [Setting(cv, r, drift, False) for cv in (0.05, 0.15, 0.30)
                 for r in (0.10, 0.25) for drift in ("steady", "step")]  # fmt: skip
    settings += [Setting(cv, 0.10, "step", True) for cv in (0.05, 0.15)]
    settings += [Setting(0.05, 0.75, "step", True)]  # the seeds' 4x
    for s in settings:
        n = trials_hit if s.regression else trials_null
        if s.cv >= 0.3:  # up to 200 pairs a level each: fewer trials (the rows only show
            n = max(50, n // 8)  # that such noise cannot decide a 10% tolerance)
        jobs = [(i * 7919 + int(s.cv * 1e4) + int(s.regression * 1e6) + hash(s.drift) % 997, s,
                 levels, rule) for i in range(n)]  # fmt: skip
        results = list(pool.map(trial, jobs, chunksize=4))
        failed = sum(r[0] for r in results) / n
        caught = sum(r[1] for r in results) / n
        regressed = sum(r[2] for r in results) / n
        pairs = statistics.median(r[3] for r in results)
        se = math.sqrt(max(failed * (1 - failed), 1 / n) / n)
        what = (
            "as good as A"
            if not s.regression
            else (
                f"{s.regression:.0%} slower" + ("" if s.everywhere else " (per-request tok/s, C=1)")
            )
        )
        hit = f"{caught:.1%}" if s.regression else "-"
        print(f"| {s.cv:.0%} | {s.drift} | {what} | {n} | {failed:.1%} ± {se:.1%} | {hit} "
              f"| {regressed:.1%} | {pairs:g} |", flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    with ProcessPoolExecutor(args.workers) as pool:
        rows(pool, 300 if args.quick else 2000, 100 if args.quick else 400)
    print(f"\n({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
