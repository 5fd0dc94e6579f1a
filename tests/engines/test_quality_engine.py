"""The degeneracy detectors on the real llama.cpp server: quiet on normal sampled output,
firing on the output of a real misconfiguration (Gemma without its BOS token)."""

from __future__ import annotations

import json

from perfgate.client import SimpleClient
from perfgate.correctness.quality import is_degenerate
from perfgate.profile import DEFAULT_PROFILE, load_profile
from tests.helpers import ROOT, session_for, small_profile

DATA = json.loads((ROOT / "suites/correctness/data/open_prompts.json").read_text())
NO_BOS = {"override-kv": "tokenizer.ggml.add_bos_token=bool:false"}


def answers(tmp_path, **server_args):
    session = session_for(small_profile(**server_args), tmp_path)
    try:
        backend = session.start_backend()
        client = SimpleClient(backend.base_url, "gemma-3-270m")
        texts = [
            client.complete(p, max_tokens=DATA["max_tokens"], temperature=0.7, seed=DATA["seed"])[
                "choices"
            ][0]["text"]
            for p in DATA["prompts"]
        ]
        texts += [
            client.complete(p, max_tokens=DATA["max_tokens"], temperature=0)["choices"][0]["text"]
            for p in DATA["prompts"]
        ]
        qa = client.complete(
            "Q: What is the capital of France?\nA:", max_tokens=16, temperature=0, stop=["\n"]
        )["choices"][0]["text"]
    finally:
        session.stop_backend()
    return texts, qa


def test_detectors_pass_normal_output_and_fire_on_a_broken_server(tmp_path):
    # the default profile's limits, as users run them (one leaked <start_of_image> allowed)
    limits = load_profile(DEFAULT_PROFILE, ROOT / "profiles").correctness.degeneracy
    normal, normal_qa = answers(tmp_path / "normal")
    sampled = normal[: len(DATA["prompts"])]
    assert [t for t in sampled if is_degenerate(t, limits)] == []
    assert "paris" in normal_qa.lower() and not is_degenerate(normal_qa, limits)

    broken, broken_qa = answers(tmp_path / "broken", **NO_BOS)
    flagged = [is_degenerate(t, limits) for t in broken]
    assert sum(1 for f in flagged if f) >= len(broken) * 2 // 3, broken
    fired = {finding.detector for findings in flagged for finding in findings}
    fired |= {f.detector for f in is_degenerate(broken_qa, limits)}
    assert fired >= {
        "loop_fraction",
        "distinct_3grams",
        "compression_ratio",
        "garbage_fraction",
        "chars",
    }, (fired, broken, broken_qa)
