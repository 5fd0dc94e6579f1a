"""The server-metrics sampler against the simulator: it reads the server's gauges through
the level and its counters at both ends, the server's token count agrees with the
client's exactly, and sampling does not move the figures it runs beside (the simulator's
schedule is exact; ``benchmarks/server_sampler_overhead.py`` measures it at length)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from perfgate.gate.figures import BY_NAME
from perfgate.measure.server import token_gap
from perfgate.sim import SimConfig, SimProcess

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from server_sampler_overhead import measure_level

CONCURRENCY = 16
REQUESTS = 48
OUTPUT_LEN = 32


def test_sampling_the_servers_metrics_leaves_the_levels_figures_where_they_were():
    runs = {"off": [], "on": []}
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.01)) as sim:
        for setting in ("off", "on", "off", "on"):
            interval = 0.1 if setting == "on" else None  # 5x the default: the worst case
            runs[setting].append(
                measure_level(sim.base_url, CONCURRENCY, REQUESTS, OUTPUT_LEN, interval)
            )
    for run in runs["on"]:
        series = run.server
        assert series is not None and series.samples >= 5, series
        assert series.peak("running") == CONCURRENCY  # every request in flight, read live
        assert series.generated_tokens == run.metrics.output_tokens == REQUESTS * OUTPUT_LEN
        assert token_gap(series, run.metrics) is None
        assert series.sampler_cpu_s > 0 and series.cpu_share() is not None
    assert all(run.server is None for run in runs["off"])
    for name in ("agg_tok_s", "per_request_tok_s", "tpot_p50_s"):
        off = statistics.median(BY_NAME[name].run_values(runs["off"]))
        on = statistics.median(BY_NAME[name].run_values(runs["on"]))
        assert abs(on / off - 1) < 0.02, (name, on, off)
    ttft = [statistics.median(BY_NAME["ttft_s"].run_values(runs[s])) for s in ("off", "on")]
    assert abs(ttft[1] - ttft[0]) < 0.002, ttft  # ms apart at most, on a 50 ms TTFT
