"""perfgate's own timing error, against the simulator's ground truth.

The simulator (:mod:`perfgate.sim`, its own process) streams on an exact schedule and
records when it read each request and wrote each chunk. perfgate measures it the way a
perf run does (:func:`perfgate.load.level.run_level`: a connection per worker, opened before
the clock, bodies encoded before, requests stamped as they leave, the loop monitor).
Both read one CLOCK_MONOTONIC, so each chunk's **observation delay** (perfgate's stamp
minus the server's write) is perfgate's error. Per level it reports:

- streamed tok/s, and the client's CPU: share of a core (all its processes together),
  streamed tok/s per client core, and CPU µs per token;
- observation delay p50 / p99 / max;
- TTFT error: perfgate's TTFT (first chunk minus its send stamp) minus the true one
  (the server's first write minus that same send), p50 / p99: the first chunk's
  observation delay, in the first wave where all requests start together too. The send
  stamp itself is checked by causality (never after the server read the request,
  ``tests/sim/test_harness_fidelity.py``); "send to server read" shows the request's transit
  plus the simulator's own queue (one thread reading C requests at once);
- ITL p50 / p99 as perfgate read it and as the server wrote it;
- the loop monitor's lag p99: the bound perfgate itself reports.

    python benchmarks/harness_fidelity.py                     # C = 1, 16, 64, 100, 256
    python benchmarks/harness_fidelity.py -c 64 --itl-ms 20   # one level
    python benchmarks/harness_fidelity.py --processes 2       # load over 2 client processes
    python benchmarks/harness_fidelity.py -c 128 --itl-ms 4 --processes 1,2,4   # 1 against N
    python benchmarks/harness_fidelity.py -c 512 --itl-ms 2 --processes 1,4 --sim-workers 6
                    # past one client process's rate: the simulator over 6 processes too
    python benchmarks/harness_fidelity.py -c 4 --burst --itl-ms 0 --ttft-ms 10 --waves 4 \
        --output-len 50000 --input-words 2 --processes 1,2   # client-bound on 2 cores
    python benchmarks/harness_fidelity.py --client httpx      # the httpx client, to compare
    python benchmarks/harness_fidelity.py --progress          # with the live terminal display
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sim_throughput import pct, process_cpu_seconds

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats
from perfgate.client.transport import pooled_client
from perfgate.load.level import LevelRun, Tally, run_level
from perfgate.load.sweep import run_sweep
from perfgate.load.workers import HttpxWorkers, RequestPlan
from perfgate.render.live import ProgressView
from perfgate.sim import SimConfig, SimProcess, SimRecord
from perfgate.workload.prompts import Prompt

# (concurrency, ITL ms): 50 tok/s a stream; C=100 streams 5k tok/s, C=256 20k tok/s
DEFAULT_LEVELS = [(1, 20.0), (16, 20.0), (64, 20.0), (100, 20.0), (256, 12.8)]


@dataclass(frozen=True)
class TaggedPlan(RequestPlan):
    """Tags each request with its prompt's first word, to pair it with the server's record."""

    def body(
        self,
        prompt: str,
        output_len: int | None = None,
        history: Sequence[tuple[str, str]] = (),
    ) -> bytes:
        extras = {**self.extras, "sim_tag": prompt.split(maxsplit=1)[0]}
        return RequestPlan.body(replace(self, extras=extras), prompt, output_len, history)


def measure(
    concurrency: int,
    itl_ms: float,
    processes: int,
    output_len: int,
    input_words: int,
    waves: int,
    client: str,
    progress: bool = False,
    sim_workers: int = 1,
    burst: bool = False,
    ttft_ms: float = 100.0,
) -> str:
    """One level on a fresh simulator; perfgate's own sweep code (``processes`` > 1: its
    :class:`perfgate.load.sweep.ShardPool`), or the httpx workers for comparison."""
    config = SimConfig(ttft_s=ttft_ms / 1000, itl_s=itl_ms / 1000, burst=burst)
    plan = TaggedPlan(api="completions", model="sim", output_len=output_len, request_timeout_s=120)
    prompts = [Prompt(f"r{i} " + "word " * input_words, None) for i in range(concurrency * waves)]
    with SimProcess(config, workers=sim_workers) as sim:
        sim_cpu = _sim_cpu_seconds(sim)
        if client == "httpx":
            run = asyncio.run(_httpx_level(sim.base_url, plan, prompts, concurrency))
        else:
            sweep = asyncio.run(
                run_sweep(
                    sim.base_url,
                    plan,
                    [concurrency],
                    lambda c, repeat: prompts,
                    warmup=0,
                    level_timeout_s=600,
                    processes=processes,
                    on_progress=_terminal_display() if progress else None,
                )
            )
            run = sweep.levels[0]
            client += "+progress" if progress else ""
        sim_cpu = _sim_cpu_seconds(sim) - sim_cpu
        truth = {t.tag: t for t in sim.records() if t.tag}
    pairs = [(r, truth[f"r{r.index}"]) for r in run.records if f"r{r.index}" in truth]
    assert run.harness is not None
    unpaired = len(run.records) - len(pairs)
    return _row(
        concurrency, itl_ms, run.harness.processes, pairs, run.harness, unpaired, client, sim_cpu
    )


def _sim_cpu_seconds(sim: SimProcess) -> float:
    """CPU seconds of the simulator so far: its workers', or its one process's."""
    pids = sim.worker_pids or ([sim.pid] if sim.pid is not None else [])
    return sum(process_cpu_seconds(pid) for pid in pids)


def _terminal_display() -> Callable[[Tally], None]:
    """What a perf run in a terminal draws while a level runs (to memory here): the
    redraws cost what they cost on a screen."""
    view = ProgressView(lambda _: None, "terminal", file=io.StringIO(), width=160)

    def show(tally: Tally) -> None:
        label = f"C={tally.concurrency} {tally.phase}"
        view.show(label, tally.total, tally.done, tally.failed, "≈1000 tok/s")

    return show


async def _httpx_level(
    base_url: str, plan: RequestPlan, prompts: list[Prompt], concurrency: int
) -> LevelRun:
    async with HttpxWorkers(lambda: pooled_client(base_url, 1, 120)) as workers:
        return await run_level(
            workers, plan, prompts, concurrency=concurrency, warmup=0, level_timeout_s=600
        )


def _row(
    concurrency: int,
    itl_ms: float,
    processes: int,
    pairs: list[tuple[RequestRecord, SimRecord]],
    harness: HarnessStats,
    failed: int,
    client: str,
    sim_cpu_s: float,
) -> str:
    delays: list[float] = []
    ttft_err: list[float] = []
    transit: list[float] = []
    client_itl: list[float] = []
    server_itl: list[float] = []
    tokens = 0
    for record, t in pairs:
        if not record.ok or len(t.written) != len(record.token_times) or record.sent is None:
            failed += 1
            continue
        tokens += record.output_tokens
        delays += [c - w for c, w in zip(record.token_times, t.written, strict=True)]
        ttft_err.append((record.token_times[0] - record.sent) - (t.written[0] - record.sent))
        transit.append(t.arrival - record.sent)
        client_itl += [b - a for a, b in itertools.pairwise(record.token_times)]
        server_itl += [b - a for a, b in itertools.pairwise(t.written)]
    wall, cpu = harness.wall_s, harness.cpu_s
    ms = 1000.0
    return (
        f"| {client} | {concurrency} | {processes} | {itl_ms:g} | {tokens / wall:,.0f} | "
        f"{cpu / wall:.0%} | {tokens / cpu:,.0f} | {cpu / tokens * 1e6:.1f} | "
        f"{sim_cpu_s / tokens * 1e6:.1f} | "
        f"{pct(delays, 0.5) * ms:.2f} / {pct(delays, 0.99) * ms:.2f} / {max(delays) * ms:.1f} | "
        f"{statistics.median(ttft_err) * ms:+.2f} / {pct(ttft_err, 0.99) * ms:+.2f} | "
        f"{statistics.median(transit) * ms:.2f} / {pct(transit, 0.99) * ms:.2f} | "
        f"{pct(client_itl, 0.5) * ms:.2f} / {pct(client_itl, 0.99) * ms:.2f} | "
        f"{pct(server_itl, 0.5) * ms:.2f} / {pct(server_itl, 0.99) * ms:.2f} | "
        f"{harness.loop_lag_p99_s * ms:.2f} / {harness.loop_lag_max_s * ms:.1f} | {failed} |"
    )


HEADER = (
    "| client | C | processes | ITL ms | streamed tok/s | client CPU | tok/s per client core | "
    "CPU µs/token | simulator CPU µs/token | "
    "observation delay ms p50 / p99 / max | TTFT error ms p50 / p99 | "
    "send to server read ms p50 / p99 | "
    "ITL read ms p50 / p99 | ITL written ms p50 / p99 | monitor lag p99 / max ms | unpaired |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--concurrency", type=int, help="one level (default: the set)")
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument(
        "--processes",
        default="1",
        help="client processes; a list (1,4) measures each level with each count, one row each",
    )
    parser.add_argument(
        "--sim-workers", type=int, default=1, help="simulator processes serving its port"
    )
    parser.add_argument("--output-len", type=int, default=200)
    parser.add_argument("--input-words", type=int, default=1000)
    parser.add_argument("--waves", type=int, default=2, help="requests per worker")
    parser.add_argument(
        "--client", choices=["wire", "httpx"], default="wire", help="wire: what perf runs use"
    )
    parser.add_argument(
        "--progress", action="store_true", help="draw the live terminal display meanwhile"
    )
    parser.add_argument(
        "--burst",
        action="store_true",
        help="the simulator writes each answer whole (SimConfig.burst): it then costs little "
        "a token, and the client's reading is the limit; timing columns lose their meaning",
    )
    args = parser.parse_args()
    levels = [(args.concurrency, args.itl_ms)] if args.concurrency else DEFAULT_LEVELS
    print(
        f"{args.output_len} tokens out, {args.input_words}-word prompts, TTFT {args.ttft_ms:g} ms, "
        f"simulator over {args.sim_workers} process(es)"
        + (", each answer written whole (burst)" if args.burst else "")
    )
    print(HEADER)
    counts = [int(n) for n in str(args.processes).split(",")]
    for (concurrency, itl), processes in itertools.product(levels, counts):
        row = measure(
            concurrency,
            itl,
            processes,
            args.output_len,
            args.input_words,
            args.waves,
            args.client,
            args.progress,
            args.sim_workers,
            args.burst,
            args.ttft_ms,
        )
        print(row, flush=True)


if __name__ == "__main__":
    main()
