"""Degenerate output: sampled open-ended answers must look like text, not loops or junk.

Greedy decoding of a small base model loops by itself on some prompts, so the
answers judged here are sampled (seeded) at the profile's ``sample_temperature``.
Limits come from the profile's ``[correctness.degeneracy]``.
"""

import json
from pathlib import Path

import pytest

from perfgate.correctness.quality import is_degenerate

pytestmark = [pytest.mark.correctness, pytest.mark.perf, pytest.mark.usability]
DATA = json.loads((Path(__file__).parent / "data" / "open_prompts.json").read_text())


def test_sampled_answers_are_not_degenerate(asker, perfgate_session):
    spec = perfgate_session.profile.correctness
    if not spec.degeneracy_check:
        pytest.skip("the profile turns the check off (correctness.degeneracy_check = false)")
    bad = []
    for prompt in DATA["prompts"]:
        answer = asker.ask(
            prompt,
            answer_tokens=DATA["max_tokens"],
            temperature=spec.sample_temperature,
            seed=DATA["seed"],
        )
        if failing := is_degenerate(answer.content, spec.degeneracy):
            bad.append(f"{prompt!r} → {answer.content[:80]!r}: {', '.join(map(str, failing))}")
    allowed = int(spec.degenerate_max * len(DATA["prompts"]))
    assert len(bad) <= allowed, (
        f"{len(bad)} of {len(DATA['prompts'])} answers degenerate (allowed {allowed}):\n"
        + "\n".join(bad)
    )
