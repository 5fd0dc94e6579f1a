"""Golden outputs: a near-tie flip is told apart from a real change of answers.

The log-prob fixtures are real responses of llama.cpp (tests/data/logprobs/README.md);
the hand-built cases below are labelled as such and test the rule's edges."""

import json
from pathlib import Path

from perfgate.correctness.golden import (
    GoldenOutputs,
    TokenChoice,
    compare_golden,
    compare_outputs,
    first_divergence,
    near_tie,
    parse_logprobs,
)

DATA = Path(__file__).parents[1] / "data" / "logprobs"


def load(name):
    return json.loads((DATA / name).read_text())["choices"][0]


def test_parses_llamacpp_chat_style_logprobs():
    choice = load("llamacpp-gemma3-in-1969.json")
    tokens = parse_logprobs(choice)
    assert tokens is not None
    assert "".join(t.text for t in tokens) == choice["text"]
    assert all(t.alternatives for t in tokens)


def test_parses_legacy_completions_logprobs():
    """Hand-built in vLLM's legacy completions layout (tokens/token_logprobs/top_logprobs)."""
    choice = {
        "text": " Paris.",
        "logprobs": {
            "tokens": [" Paris", "."],
            "token_logprobs": [-0.1, -0.5],
            "top_logprobs": [{" Paris": -0.1, " Lyon": -2.5}, {".": -0.5, ",": -1.0}],
            "text_offset": [0, 6],
        },
    }
    tokens = parse_logprobs(choice)
    assert [t.text for t in tokens] == [" Paris", "."]
    assert tokens[0].alternatives == {" Paris": -0.1, " Lyon": -2.5}


def test_absent_or_malformed_logprobs_are_none():
    assert parse_logprobs({"text": "x"}) is None
    assert parse_logprobs({"text": "x", "logprobs": {"tokens": ["x"]}}) is None


def test_real_speculative_flip_is_a_near_tie():
    """Real: the non-speculative server (the reference) chose 'In' at -1.687 over 'The' at
    -1.728; the speculative one wrote 'The' and reported no alternatives of its own. The
    reference's log-probs show the tie."""
    plain = load("llamacpp-gemma3-in-1969.json")
    spec = load("llamacpp-gemma3-in-1969-speculative.json")
    diff = compare_outputs(
        "In 1969, the first humans",
        plain["text"],
        spec["text"],
        parse_logprobs(spec),
        parse_logprobs(plain),
        margin=0.2,
    )
    assert diff.outcome == "tie", diff.message()
    assert "nats" in diff.why
    strict = compare_outputs(
        "p", plain["text"], spec["text"], parse_logprobs(spec), parse_logprobs(plain), 0.01
    )
    assert strict.outcome == "changed" and "tie margin" in strict.why


def test_a_real_change_of_answers_is_not_a_tie():
    """Real reference log-probs; the changed answer ' Mars' is an alternative far below the
    token chosen (2.9 nats): a change, however it came about."""
    plain = load("llamacpp-gemma3-in-1969.json")
    tokens = parse_logprobs(plain)
    text = plain["text"]
    at = text.index(" the moon.")
    changed = text[:at] + " Mars were the first"
    diff = compare_outputs("p", text, changed, None, tokens, margin=0.2)
    assert diff.outcome == "changed", diff.message()
    assert "> tie margin" in diff.why


def test_without_logprobs_any_divergence_is_a_change():
    diff = compare_outputs("p", "abc def", "abc xyz")
    assert diff.outcome == "changed" and diff.first_divergence == 4


def test_tie_needs_the_other_text_among_the_alternatives():
    """Hand-built: the other continuation is not among the top tokens."""
    tokens = [TokenChoice(text="A", logprob=-0.1, alternatives={"A": -0.1, "B": -0.15})]
    assert near_tie("Czz", "A", tokens, 0, 0.2)[0] is False
    assert near_tie("Bzz", "A", tokens, 0, 0.2)[0] is True


def test_a_fork_at_a_token_boundary_is_found_in_the_token_before():
    """Hand-built, the shape of a real AVX2 twin divergence: the reference chose ' a' then
    ' healthy', the output ' anyone'. The texts part after ' a', where the reference's
    next token starts, but the fork was ' a' against ' anyone'."""
    reference = [
        TokenChoice(text=" a", logprob=-0.9, alternatives={" a": -0.9, " anyone": -1.0}),
        TokenChoice(text=" healthy", logprob=-0.5, alternatives={" healthy": -0.5}),
    ]
    expected, actual = " a healthy", " anyone who"
    at = first_divergence(expected, actual)
    assert at == 2
    tie, why = near_tie(actual, expected, reference, at, 0.2)
    assert tie is True and "' anyone'" in why
    assert near_tie(actual, expected, reference, at, 0.05)[0] is False  # 0.1 nats apart
    far = [reference[0].model_copy(update={"alternatives": {" a": -0.9}}), reference[1]]
    assert near_tie(actual, expected, far, at, 0.2)[0] is False


def test_output_shorter_than_reference_is_a_change():
    tokens = [TokenChoice(text="ab", logprob=-0.1, alternatives={"ab": -0.1})]
    assert first_divergence("abc", "ab") == 2
    assert near_tie("abc", "ab", tokens, 2, 0.2)[0] is False


def test_golden_file_keeps_token_logprobs_and_uses_them():
    plain = load("llamacpp-gemma3-in-1969.json")
    spec = load("llamacpp-gemma3-in-1969-speculative.json")
    prompt = "In 1969, the first humans"
    golden = GoldenOutputs(
        schema_version=1,
        max_tokens=32,
        outputs={prompt: plain["text"]},
        tokens={prompt: parse_logprobs(plain)},
    )
    again = GoldenOutputs.model_validate_json(golden.model_dump_json())
    [diff] = compare_golden(again, {prompt: spec["text"]}, {prompt: None}, margin=0.2)
    assert diff.outcome == "tie"


def test_golden_files_without_tokens_still_load():
    old = '{"schema_version": 1, "max_tokens": 32, "outputs": {"p": "x"}}'
    assert GoldenOutputs.model_validate_json(old).tokens == {}
