"""Prompt building for the seeds' sweep shape against the real llama.cpp server.

The seeds' sweep sends about 900 prompts of 1000 tokens. This builds them twice on the
embedded default server (Gemma 3 270M), counting every tokenize request:

- **search** (before): each prompt searched for by counting, one request after another
  (:func:`perfgate.workload.prompts.exact_prompt`);
- **plan** (now): word costs counted once, each prompt planned from them and checked
  with one count, 8 at a time (:func:`perfgate.workload.prompts.build_prompts`).

    python benchmarks/prompt_building.py                 # 900 prompts, completions
    python benchmarks/prompt_building.py --api chat      # chat template included
    python benchmarks/prompt_building.py --prompts 100   # quicker
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import httpx

from perfgate.profile import DEFAULT_PROFILE, load_profile
from perfgate.run.session import PerfgateSession
from perfgate.workload.prompts import Tokenizer, build_prompts, exact_prompt, word_costs

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=900)
    parser.add_argument("--input-len", type=int, default=1000)
    parser.add_argument("--api", choices=["completions", "chat"], default="completions")
    parser.add_argument("--skip-search", action="store_true", help="only the plan method")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        session = PerfgateSession(
            load_profile(DEFAULT_PROFILE, ROOT / "profiles"),
            root=ROOT,
            baselines_dir=Path(tmp),
            output_dir=Path(tmp),
            progress=lambda _: None,
        )
        backend = session.start_backend()
        try:
            with httpx.Client(
                base_url=backend.base_url,
                timeout=60,
                limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
            ) as client:
                report(client, session, args)
        finally:
            session.stop_backend()


def report(client: httpx.Client, session: PerfgateSession, args: argparse.Namespace) -> None:
    name = session.profile.model.name
    shape = f"{args.prompts} prompts of {args.input_len} tokens ({args.api})"
    print(f"llama.cpp {session.run.engine_version}, {shape}")
    tok = Tokenizer(client, session.engine, name, args.api)
    start = time.perf_counter()
    costs = word_costs(tok)
    calibrated = time.perf_counter() - start
    calibration_calls = tok.calls
    prompts = build_prompts(tok, args.prompts, args.input_len, seed=1, costs=costs)
    planned = time.perf_counter() - start
    assert all(p.tokens == args.input_len for p in prompts)
    print(
        f"  plan:   {planned:7.2f} s, {tok.calls:6d} tokenize requests "
        f"(word costs: {calibration_calls} requests, {calibrated:.2f} s)"
    )
    if args.skip_search:
        return
    tok = Tokenizer(client, session.engine, name, args.api)
    rng = random.Random(1)
    start = time.perf_counter()
    for _ in range(args.prompts):
        exact_prompt(tok, rng, args.input_len)
    searched = time.perf_counter() - start
    print(f"  search: {searched:7.2f} s, {tok.calls:6d} tokenize requests (sequential)")


if __name__ == "__main__":
    main()
