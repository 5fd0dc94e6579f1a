"""How the server's answers are checked before its speed is measured."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from perfgate.profile.base import Strict


class DegeneracyLimits(Strict):
    """Thresholds of the degeneracy detectors (calibrated per profile on real output)."""

    min_chars: int = Field(1, ge=0, description="Fewer non-blank characters is 'empty'.")
    max_loop_fraction: float = Field(
        0.6, gt=0, le=1, description="Share of the text inside a loop repeating at its end."
    )
    min_distinct_3grams: float = Field(
        0.35, ge=0, le=1, description="Distinct word 3-grams / all word 3-grams."
    )
    max_compression_ratio: float = Field(
        4.0, gt=1, description="Bytes / zlib-compressed bytes; loops compress well."
    )
    max_garbage_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of control, replacement or unassigned characters."
    )
    min_words: int = Field(8, ge=1, description="Fewer words: no distinct-3-gram judgement.")
    min_chars_for_shape: int = Field(
        64, ge=1, description="Shorter texts: no loop or compression judgement."
    )


class CorrectnessSpec(Strict):
    """What the correctness suite demands of this backend."""

    degeneracy: DegeneracyLimits = Field(default_factory=DegeneracyLimits)
    degeneracy_check: bool = Field(
        True,
        description="Sample the open-ended answers and judge them for degenerate text; "
        "false skips the check (it says so in the test report, as a skip), e.g. for a "
        "quick wiring run whose model is checked elsewhere.",
    )
    degenerate_max: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of sampled open-ended answers allowed to look "
        "degenerate (a small base model loops now and then).",
    )
    sample_temperature: float = Field(
        0.7,
        ge=0,
        description="Temperature of the open-ended answers judged for degeneracy "
        "(greedy decoding of a small base model loops by itself).",
    )
    prompt_style: Literal["completion", "chat"] = Field(
        "completion", description="Base models get completion prompts, instruct models chat."
    )
    reasoning: bool = Field(
        False,
        description="A reasoning model behind a reasoning parser: chat answers must carry "
        "separate non-empty reasoning and content; every check leaves it reasoning_budget "
        "tokens to think and judges the content after the reasoning.",
    )
    reasoning_budget: int = Field(
        2048,
        ge=1,
        description="Tokens a reasoning model may spend thinking before its answer, added to "
        "every check's answer budget (reasoning = true only).",
    )
    structured_output: bool = Field(
        False,
        description="Check structured output (chat): answers asked for with response_format "
        "(a JSON Schema, and JSON-object mode) must parse and validate, streamed and not.",
    )
    structured_min_valid: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of structured answers that must parse and validate (guided "
        "decoding makes every answer valid: 1.0).",
    )
    tool_calls: bool = Field(
        False,
        description="Check tool calls (chat): offered functions with JSON Schema parameters; "
        "a call comes back parsed (finish_reason tool_calls, an offered name, arguments valid "
        "against the schema, no call text in content), the same streamed and not, and a "
        "follow-up turn uses the tool's result.",
    )
    tool_choice: Literal["auto", "required"] = Field(
        "auto",
        description="tool_choice of the prompts that need a call. 'auto' also checks that a "
        "prompt needing none gets none; 'required' makes the server force a call (a model "
        "too small to decide by itself).",
    )
    parallel_tool_calls: bool = Field(
        False, description="Also ask for two calls at once (parallel_tool_calls)."
    )
    eos_token_id: int | None = Field(
        None,
        description="The model's end-of-sequence token. A base model rarely ends on its own: "
        "the end-of-sequence check nudges this token with a logit bias (eos_logit_bias) so "
        "the model ends after a short answer. None: the check expects an unbiased natural "
        "end (instruct models).",
    )
    eos_logit_bias: float = Field(
        6.0, ge=0, le=100, description="Logit bias given to eos_token_id in that check."
    )
    known_answers_min: float = Field(
        1.0, gt=0, le=1, description="Share of known-answer prompts that must be right."
    )
    code_tasks: bool = Field(
        True,
        description="Run the code tasks; false for a model too small to write code (the "
        "check then says so in the test report, as a skip).",
    )
    code_sandbox: Literal["isolated", "allow-guard"] = Field(
        "isolated",
        description="How the code tasks run the model's code. 'isolated': in OS namespaces "
        "(bubblewrap); the check refuses to run where they are unavailable. 'allow-guard': "
        "isolated where possible, else an audit hook and resource limits, which are not a "
        "security boundary (the report says which ran).",
    )
    code_min_pass: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of code tasks whose code must pass its tests (calibrate it on "
        "the model's real answers; 0 would let every answer fail).",
    )
    golden_min_exact: float = Field(
        1.0, gt=0, le=1, description="Share of golden greedy outputs that must match exactly."
    )
    golden_tie_margin: float = Field(
        0.2,
        ge=0,
        description="Golden and twin comparisons: a divergence where the output's own "
        "log-probs put the reference's token within this many nats of the chosen one is a "
        "near-tie flip (batched or speculative numerics), not a change. 0: exact only.",
    )
    twin_profile: str | None = Field(
        None, description="Non-speculative twin whose greedy output this profile must equal."
    )
    twin_min_exact: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of greedy outputs that must equal the twin's "
        "(batched draft verification can flip a near-tie token).",
    )
