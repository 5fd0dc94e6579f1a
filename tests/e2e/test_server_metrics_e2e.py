"""The server's own metrics on the real llama.cpp server, as a user runs perfgate: a
shared-prefix workload recorded with prompt caching on, then gated with it off. The
prefix-cache hit rate, read from llama-server's /metrics and gated through
``gate.figures``, falls to 0, and the diagnosis says so. (Fewer slots, the queue named:
``test_plugin_e2e.py::test_attached_server_with_one_slot...``.)"""

from __future__ import annotations

import json
import re

from tests.helpers import TINY, profile_toml, run_pytest, runs_in

PREFIX = {
    **TINY,
    'name = "tiny"': 'name = "prefix"',
    "input_len = 32": 'input_len = 128\nprompts = "shared-prefix"\nprefix_len = 112',
    "levels = [1, 2]": "levels = [2]",
    "rounds = 1": "rounds = 3",
    "single_requests = 2": "single_requests = 1",
    "abort_below = 0.5 ": 'abort_below = 0 \nfigures = ["server_prefix_hit_rate"]\n# ',
    # Gemma 3 attends through a sliding window: llama-server can then reuse a cached
    # prefix only from a full-size SWA cache (without it, 0 hits: each prompt's 16 own
    # tokens are past the last context checkpoint, so the whole prompt is evaluated)
    "metrics = true }": "metrics = true, swa-full = true }",
}
CACHE_OFF = {"metrics = true }": "metrics = true, swa-full = true, no-cache-prompt = true }"}


def test_prompt_caching_off_drops_the_prefix_hit_rate_and_the_diagnosis_names_it(tmp_path):
    baselines = f"--override-ini=perfgate_baselines_dir={tmp_path / 'baselines'}"
    common = ("suites/perf", "-m", "perf", "-k", "sweep", baselines)
    (tmp_path / "on").mkdir()
    on = profile_toml(PREFIX, tmp_path / "on")
    record = run_pytest(
        *common,
        f"--perf-profile={on}",
        "--perf-update-baselines",
        "--perf-tolerance=0.5",  # prefill of 8x the tokens is far past 1.5x
        f"--perf-output={tmp_path / 'rec'}",
    )
    out = record.stdout + record.stderr
    assert record.returncode == 0, out
    recorded = json.loads(runs_in(tmp_path / "rec")[-1].read_text())
    rates = [
        lv["server"]["after"]["prefix_hits"] - lv["server"]["before"]["prefix_hits"]
        for lv in recorded["measurements"]["sweep"]["levels"]
    ]
    assert all(r > 0 for r in rates), rates  # the cache held prefixes: hits counted
    assert "sweep.c2.server_prefix_hit_rate" in out, out

    (tmp_path / "off").mkdir()
    off = profile_toml({**PREFIX, **CACHE_OFF}, tmp_path / "off")
    gate = run_pytest(*common, f"--perf-profile={off}", f"--perf-output={tmp_path / 'gate'}")
    out = gate.stdout + gate.stderr
    assert gate.returncode == 1, out
    assert re.search(r"sweep\.c2\.server_prefix_hit_rate: measured 0 .*→ REGRESSED", out), out
    assert re.search(r"sweep\.c2\.ttft_s: measured .*→ REGRESSED", out), out
    causes = out[out.rindex("likely causes, most likely first:") :]
    assert re.search(
        r"\d\. prefix-cache hit rate 0% at sweep C=2 \(baseline \d+%\): prompt \(prefix\) "
        r"caching is off, or its cache evicted \(llamacpp:prompt_tokens_cached_total\)",
        causes,
    ), causes
    assert "prompt (prefix) cache off" in causes, causes  # the flag, from its command line
