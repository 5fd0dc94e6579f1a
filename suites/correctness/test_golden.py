"""Golden greedy outputs and lossless speculative decoding.

``--perf-update-baselines`` records the greedy outputs of a fixed prompt set next to the
baseline; later runs report the exact-match rate and where each output first
diverges. This catches "same speed, different answers" after an engine upgrade. A
divergence where the output's own log-probs show a near-tie (the reference's token
within ``golden_tie_margin`` nats of the one chosen) is a tie, not a change: batched or
speculative verification may flip it. Recording over golden outputs that changed for
real fails, unless ``--perf-accept-golden`` says the new answers are intended.

A profile with ``twin_profile`` (speculative decoding) must produce the greedy output of
its non-speculative twin. The twin runs alone, on its own port, before the profile's own
server starts (never both at once: two 27B servers do not fit one GPU host).
"""

import json
from pathlib import Path

import pytest

from perfgate.correctness.golden import GoldenOutputs, compare_golden, greedy_outputs

pytestmark = [pytest.mark.correctness, pytest.mark.perf]
DATA = json.loads((Path(__file__).parent / "data" / "golden_prompts.json").read_text())


def summary(diffs, minimum, what):
    """The share that matched (exact or near-tie) and the failure message."""
    matched = sum(d.outcome != "changed" for d in diffs) / len(diffs)
    ties = sum(d.outcome == "tie" for d in diffs)
    lines = "\n".join(d.message() for d in diffs if not d.exact)
    return matched, (
        f"{what}: {matched:.0%} match, {ties} of them near-tie flips "
        f"(minimum {minimum:.0%}):\n{lines}"
    )


def test_golden_greedy_outputs(llm, perfgate_session):
    session = perfgate_session
    greedy = greedy_outputs(
        llm, DATA["prompts"], DATA["max_tokens"], session.engine.deterministic_extras()
    )
    session.golden_outputs = GoldenOutputs(
        schema_version=1,
        max_tokens=DATA["max_tokens"],
        outputs=greedy.outputs,
        tokens=greedy.tokens,
    )
    golden = session.golden
    if golden is None:
        if session.update_baselines:
            return  # the first recording: written at the end of the run
        pytest.skip(
            "no golden outputs recorded yet for this profile and hardware: "
            "record them with `pytest -m perf --perf-update-baselines`"
        )
    spec = session.profile.correctness
    diffs = compare_golden(golden, greedy.outputs, greedy.tokens, spec.golden_tie_margin)
    matched, message = summary(diffs, spec.golden_min_exact, "golden greedy outputs")
    if session.update_baselines and session.options.accept_golden:
        return  # the changed answers are intended: recorded, their diff printed
    hint = (
        "\nrecording refused: if the new answers are intended, record them with "
        "--perf-update-baselines --perf-accept-golden"
        if session.update_baselines
        else ""
    )
    assert matched >= spec.golden_min_exact, message + hint


@pytest.mark.twin(prompts=DATA["prompts"], max_tokens=DATA["max_tokens"])
def test_speculative_decoding_is_lossless(llm, perfgate_session):
    session = perfgate_session
    spec = session.profile.correctness
    if spec.twin_profile is None:
        pytest.skip("profile has no twin_profile (no speculative decoding to check)")
    if session.base_url:  # cannot stop a server perfgate did not start; said in the run JSON
        pytest.skip(f"twin check not possible on an attached server: {session.twin_problem()}")
    theirs = session.twin_outputs()  # computed before this profile's server started
    ours = greedy_outputs(
        llm, DATA["prompts"], DATA["max_tokens"], session.engine.deterministic_extras()
    )
    reference = GoldenOutputs(
        schema_version=1,
        max_tokens=DATA["max_tokens"],
        outputs=theirs.outputs,
        tokens=theirs.tokens,
    )
    diffs = compare_golden(reference, ours.outputs, ours.tokens, spec.golden_tie_margin)
    matched, message = summary(
        diffs, spec.twin_min_exact, f"speculative profile against its twin {spec.twin_profile}"
    )
    assert matched >= spec.twin_min_exact, message
