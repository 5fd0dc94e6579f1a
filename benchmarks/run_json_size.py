"""Run JSON size for the seeds' sweep shape, before and after the compact encoding.

The seeds' sweep: C = 1, 2, 4, 8, 16, 32, 64, 100, 2 requests per worker, 2 repeats (908
requests), 500 output tokens each, one token a chunk, about 4 characters of text a
token. Token times are drawn like a GPU stream (20 ms apart, jittered). The records are
perfgate's own (``RequestRecord``, ``LevelData``, ``RunRecord``); only the encodings
differ:

- before: every token time an absolute float, the whole file indented (schema 1);
- after: token times as integer microsecond gaps, arrays of numbers on one line
  (schema 2), and the same gzip-compressed as ``--perf-update-baselines`` keeps it.

    python benchmarks/run_json_size.py
"""

from __future__ import annotations

import gzip
import json
import random

from perfgate.client import RequestRecord
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData, Measurement
from perfgate.results.run import RunRecord

LEVELS = [1, 2, 4, 8, 16, 32, 64, 100]
WORDS = "the quick brown fox jumps over a lazy dog while seven tired engineers watch".split()


def record(rng: random.Random, index: int, start: float) -> RequestRecord:
    sent = start + rng.uniform(0.0001, 0.0005)
    t = sent + rng.uniform(0.05, 0.3)
    times = []
    for _ in range(500):
        times.append(t)
        t += rng.gauss(0.02, 0.002)
    text = " ".join(rng.choice(WORDS) for _ in range(500))
    return RequestRecord(
        index=index,
        start=start,
        sent=sent,
        end=t,
        token_times=times,
        prompt_tokens=1000,
        completion_tokens=500,
        finish_reason="length",
        text=text[:2000],
        status=200,
    )


def seeds_run() -> RunRecord:
    rng = random.Random(0)
    sweep = Measurement()
    clock = 1000.0
    for repeat in range(2):
        for c in LEVELS:
            records = [record(rng, i, clock + (i % c) * 0.001) for i in range(2 * c)]
            level = LevelRun(c, records, clock, max(r.end for r in records))
            sweep.levels.append(LevelData.from_run(level, repeat))
            clock = level.end + 1
    return RunRecord(
        perfgate_version="x",
        profile={"name": "seeds"},
        profile_digest="x",
        engine="vllm",
        launcher="process",
        measurements={"sweep": sweep},
    )


def before(run: RunRecord) -> str:
    """Schema 1's encoding: absolute float token times, fully indented."""
    data = json.loads(run.model_dump_json())
    levels = run.measurements["sweep"].levels
    for level, stored in zip(data["measurements"]["sweep"]["levels"], levels, strict=True):
        for raw, rec in zip(level["records"], stored.records, strict=True):
            del raw["token_gaps_us"]
            raw["token_times"] = rec.token_times
    return json.dumps(data, indent=1)


def main() -> None:
    run = seeds_run()
    old = before(run).encode()
    new = run.text().encode()
    requests = sum(len(lv.records) for lv in run.measurements["sweep"].levels)
    print(f"seeds' sweep shape: {requests} requests x 500 tokens")
    print(f"  before (schema 1, indented floats): {len(old) / 1e6:6.2f} MB")
    print(f"  after  (schema 2, microsecond gaps): {len(new) / 1e6:6.2f} MB")
    print(f"  after, gzip (the copy beside a baseline): {len(gzip.compress(new)) / 1e6:6.2f} MB")
    text = sum(len(r.text) for lv in run.measurements["sweep"].levels for r in lv.records)
    print(f"  of which output text: {text / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
