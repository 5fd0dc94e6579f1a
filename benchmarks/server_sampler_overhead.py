"""What reading the server's /metrics during a level costs the figures it measures.

The simulator (its own process, an exact schedule) serves the same level again and again,
alternately with perfgate's server-metrics sampler reading its /metrics (vLLM's names and a
text of vLLM's size) and without. Per setting it reports the gated figures' medians over
the runs, the harness's own timing error bound (loop lag p99), and the sampler's cost: its
thread's CPU time as a share of the level, and the samples it took.

    python benchmarks/server_sampler_overhead.py                 # C=16, 0.5 s, 5 runs each
    python benchmarks/server_sampler_overhead.py -c 64 --interval 0.1 --runs 7
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from perfgate.engines import get_engine
from perfgate.gate.figures import BY_NAME
from perfgate.load.level import LevelRun, run_level
from perfgate.load.workers import RequestPlan, WireWorkers
from perfgate.measure.data import LevelData
from perfgate.measure.server import ServerSampler, ServerSeries, http_fetch
from perfgate.sim import SimConfig, SimProcess
from perfgate.workload.prompts import Prompt

FIGURES = ("agg_tok_s", "per_request_tok_s", "ttft_s", "tpot_p50_s", "itl_p50_s")


def measure_level(
    base_url: str, concurrency: int, requests: int, output_len: int, interval_s: float | None
) -> LevelData:
    """One level run against the simulator, with the sampler reading every ``interval_s``
    (None: no sampler)."""
    plan = RequestPlan(api="completions", model="sim", output_len=output_len, request_timeout_s=60)
    prompts = [Prompt(f"prompt {i} " + "word " * 60, None) for i in range(requests)]
    sampler = None
    close = None
    if interval_s is not None:
        fetch, close = http_fetch(base_url, "/metrics", {})
        sampler = ServerSampler(fetch, get_engine("vllm").metric_map, interval_s)

    async def level() -> LevelRun:
        async with WireWorkers(base_url) as workers:
            if sampler is not None:
                sampler.open()
            try:
                return await run_level(
                    workers, plan, prompts, concurrency=concurrency, warmup=0, level_timeout_s=120
                )
            finally:
                if sampler is not None:
                    sampler.stop()

    run = asyncio.run(level())
    series: ServerSeries | None = sampler.close() if sampler is not None else None
    if close is not None:
        close()
    return LevelData.from_run(run, server=series)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    parser.add_argument("--interval", type=float, default=0.5, help="sampling period, s")
    parser.add_argument("--runs", type=int, default=5, help="runs of each setting")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    args = parser.parse_args()
    config = SimConfig(ttft_s=0.05, itl_s=args.itl_ms / 1000)
    results: dict[str, list[LevelData]] = {"off": [], "on": []}
    with SimProcess(config) as sim:
        for i in range(args.runs * 2):
            setting = "on" if i % 2 else "off"
            interval = args.interval if setting == "on" else None
            results[setting].append(
                measure_level(
                    sim.base_url, args.concurrency, args.requests, args.output_len, interval
                )
            )
    print(
        f"C={args.concurrency}, {args.requests} requests x {args.output_len} tokens, ITL "
        f"{args.itl_ms:g} ms, sampler every {args.interval:g} s, {args.runs} runs each"
    )
    header = f"{'sampler':>7} | " + " | ".join(f"{f:>17}" for f in FIGURES)
    header += f" | {'lag p99 (ms)':>12} | {'sampler CPU':>11} | {'samples':>7}"
    print(header)
    print("-" * len(header))
    for setting, runs in results.items():
        cells = []
        for name in FIGURES:
            values = BY_NAME[name].run_values(runs)
            cells.append(f"{statistics.median(values):>17.5g}")
        lag = statistics.median(r.harness.error_bound_s * 1000 for r in runs if r.harness)
        series = [r.server for r in runs if r.server is not None]
        cpu = statistics.median(s.cpu_share() or 0.0 for s in series) if series else None
        samples = statistics.median(s.samples for s in series) if series else 0
        print(
            f"{setting:>7} | {' | '.join(cells)} | {lag:>12.2f} | "
            f"{'-' if cpu is None else f'{cpu:.3%}':>11} | {samples:>7g}"
        )
    for name in FIGURES:
        off = statistics.median(BY_NAME[name].run_values(results["off"]))
        on = statistics.median(BY_NAME[name].run_values(results["on"]))
        print(f"{name}: on/off {on / off:.4f}")


if __name__ == "__main__":
    main()
