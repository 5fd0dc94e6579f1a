"""How correctness checks ask and read, per model kind, and the seeds' profiles' checks run
on real recorded streams (tests/data/streams/README.md says where each was captured)."""

import json
from pathlib import Path

import httpx
import pytest

from perfgate.client import SimpleClient
from perfgate.correctness.asking import Answer, Asker, model_kind
from perfgate.correctness.quality import leaked_markers, reasoning_problems, thinking_share
from perfgate.engines import get_engine
from perfgate.profile import CorrectnessSpec, load_profile

ROOT = Path(__file__).resolve().parents[2]
STREAMS = Path(__file__).parents[1] / "data" / "streams"


def replaying(sse: str | None = None, body: str | None = None) -> httpx.MockTransport:
    """A transport that answers every request with a recorded response, keeping the
    request bodies it saw."""
    seen: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        seen.append(sent)
        if sent.get("stream"):
            data = (STREAMS / sse).read_bytes()
            stream = httpx.ByteStream(data)  # read as it would arrive, not pre-loaded
            return httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=(STREAMS / body).read_bytes())

    transport = httpx.MockTransport(handle)
    transport.seen = seen  # type: ignore[attr-defined]
    return transport


def asker_for(profile_name: str, transport: httpx.MockTransport) -> Asker:
    profile = load_profile(profile_name, ROOT / "profiles")
    client = SimpleClient(
        "http://replay",
        profile.model.name,
        reasoning_fields=get_engine(profile.engine).reasoning_fields,
        fields=profile.server.request_fields,
        transport=transport,
    )
    return Asker(client, profile.correctness)


def test_model_kinds():
    assert model_kind(CorrectnessSpec()) == "base"
    assert model_kind(CorrectnessSpec(prompt_style="chat")) == "instruct"
    assert model_kind(CorrectnessSpec(prompt_style="chat", reasoning=True)) == "reasoning"


def test_reasoning_models_get_a_thinking_budget_and_no_stop_strings():
    spec = CorrectnessSpec(prompt_style="chat", reasoning=True, reasoning_budget=500)
    asker = Asker(SimpleClient("http://x", "m"), spec)
    assert asker.budget(24) == 524
    assert "stop" not in asker._params(24, ["\n"])  # a newline would end the thinking
    base = Asker(SimpleClient("http://x", "m"), CorrectnessSpec())
    assert base.budget(24) == 24 and base._params(24, ["\n"])["stop"] == ["\n"]


def answer(**kw) -> Answer:
    fields = {
        "content": "Paris.",
        "reasoning": "",
        "finish_reason": "stop",
        "completion_tokens": 3,
        "prompt_tokens": 10,
    }
    return Answer(**{**fields, **kw})


def test_chunks_may_carry_several_tokens_but_never_none():
    assert answer(chunks=1, completion_tokens=5).chunk_problem() is None  # speculative
    assert answer(chunks=5, completion_tokens=5).chunk_problem() is None
    assert "at least one token" in answer(chunks=6, completion_tokens=5).chunk_problem()
    assert "no chunk" in answer(chunks=0, completion_tokens=5).chunk_problem()


def test_natural_end_problems():
    asker = Asker(SimpleClient("http://x", "m"), CorrectnessSpec(prompt_style="chat"))
    assert asker.natural_end_problems(answer(), 48) == []
    problems = asker.natural_end_problems(
        answer(finish_reason="length", completion_tokens=48, content="Paris<|im_end|>"), 48
    )
    assert len(problems) == 3 and "<|im_end|>" in problems[2]


@pytest.mark.parametrize(
    ("text", "leaked"),
    [
        ("Paris.<|im_end|>", ["<|im_end|>"]),
        ("Paris.<|endoftext|>", ["<|endoftext|>"]),
        ("Paris.<eos>", ["<eos>"]),
        ("Paris.</s>", ["</s>"]),
        ("Paris.<end_of_turn>", ["<end_of_turn>"]),
        ("Paris is 3 < 5 </p>", []),
    ],
)
def test_leaked_end_markers(text, leaked):
    assert leaked_markers(text) == leaked


# -- real recorded streams -----------------------------------------------------------------


def test_llamacpp_reasoning_stream_read_as_reasoning_then_content():
    transport = replaying("llamacpp-smollm2-reasoning.sse", "llamacpp-smollm2-reasoning.json")
    asker = asker_for("llamacpp-smollm2-reasoning", transport)
    streamed = asker.stream("Q", answer_tokens=200, temperature=0)
    plain = asker.ask("Q", answer_tokens=200, temperature=0)
    for got in (streamed, plain):
        assert got.reasoning.startswith("1. 17 sheep") and got.content.strip()
        assert reasoning_problems(got.reasoning, got.content) == []
    assert streamed.chunk_problem() is None
    # the thinking counted off the stream: its chunks of reasoning text, fewer than all
    assert streamed.reasoning_tokens is not None
    assert 0 < streamed.reasoning_tokens < (streamed.chunks or 0)
    assert thinking_share(streamed.reasoning_tokens, 64).endswith(
        "of the 64-token reasoning budget (correctness.reasoning_budget)"
    )


def test_think_tags_left_in_the_reasoning_field_are_named():
    """(Constructed: the real llama.cpp answer's reasoning with the tags a parser that
    only splits would pass on.)"""
    transport = replaying("llamacpp-smollm2-reasoning.sse", "llamacpp-smollm2-reasoning.json")
    got = asker_for("llamacpp-smollm2-reasoning", transport).ask("Q", answer_tokens=200)
    tagged = f"<think>{got.reasoning}</think>"
    assert reasoning_problems(tagged, got.content) == [
        "think tags left in the reasoning field (the parser passed them on)"
    ]


def test_parser_off_streams_fail_the_reasoning_check_saying_why():
    for profile, stem in [
        ("llamacpp-smollm2-reasoning", "llamacpp-smollm2-reasoning-parser-off"),
        ("vllm-cpu-smollm2-reasoning", "vllm-cpu-smollm2-reasoning-parser-off"),
    ]:
        asker = asker_for(profile, replaying(f"{stem}.sse", f"{stem}.json"))
        for got in (asker.stream("Q", answer_tokens=200), asker.ask("Q", answer_tokens=200)):
            problems = reasoning_problems(got.reasoning, got.content)
            assert "no reasoning text (checked fields: reasoning, reasoning_content)" in problems
            assert any("think tags leaked" in p for p in problems), (profile, problems)


def test_vllm_reasoning_profile_sends_its_request_fields():
    transport = replaying("vllm-cpu-smollm2-reasoning.sse", "vllm-cpu-smollm2-reasoning.json")
    asker = asker_for("vllm-cpu-smollm2-reasoning", transport)
    got = asker.stream("Q", answer_tokens=200, temperature=0)
    assert reasoning_problems(got.reasoning, got.content) == []
    # vLLM's usage says reasoning_tokens 0 beside its reasoning text: the chunks count
    assert got.reasoning_tokens is not None and got.reasoning_tokens > 0
    sent = transport.seen[0]
    assert "regex" in sent["structured_outputs"] and sent["max_tokens"] == asker.budget(200)


# -- the seeds' profiles, on streams of their shape ------------------------------------------


def test_seeds_vllm_dflash_checks_pass_on_a_real_multi_token_reasoning_stream():
    """The seeds' vLLM profile (reasoning, speculative) read through its own engine's
    fields and model kind, against a real vLLM reasoning stream with n-gram speculation:
    reasoning then content, chunks carrying several tokens, no logit_bias sent, the
    thinking budget on top of the answer's."""
    transport = replaying(
        "vllm-cpu-smollm2-reasoning-ngram.sse", "vllm-cpu-smollm2-reasoning-ngram.json"
    )
    asker = asker_for("qwen36-27b-vllm-dflash", transport)
    assert asker.kind == "reasoning" and asker.api == "chat"
    streamed = asker.stream("Q", answer_tokens=256, temperature=0)
    plain = asker.ask("Q", answer_tokens=256, temperature=0)
    for got in (streamed, plain):
        assert reasoning_problems(got.reasoning, got.content) == [], got.describe()
        assert got.content.strip() and not leaked_markers(got.content)
    assert streamed.chunk_problem() is None
    assert streamed.chunks < streamed.completion_tokens  # 102 chunks for 127 tokens
    for sent in transport.seen:
        assert sent["max_tokens"] == 256 + 4096
        assert "logit_bias" not in sent and "min_p" not in sent and "stop" not in sent


def test_seeds_sglang_profile_reads_reasoning_content():
    """The seeds' SGLang profile reads `reasoning_content`, as llama.cpp streams it (real
    capture; one token a chunk: no engine here streams reasoning_content several tokens a
    chunk, which the vLLM test above covers for the chunk rule)."""
    transport = replaying("llamacpp-smollm2-reasoning.sse", "llamacpp-smollm2-reasoning.json")
    asker = asker_for("qwen36-27b-sglang-mtp", transport)
    for got in (asker.stream("Q", answer_tokens=256), asker.ask("Q", answer_tokens=256)):
        assert reasoning_problems(got.reasoning, got.content) == [], got.describe()
    parser_off = replaying(
        "llamacpp-smollm2-reasoning-parser-off.sse", "llamacpp-smollm2-reasoning-parser-off.json"
    )
    got = asker_for("qwen36-27b-sglang-mtp", parser_off).stream("Q", answer_tokens=256)
    assert "no reasoning text (checked fields: reasoning, reasoning_content)" in reasoning_problems(
        got.reasoning, got.content
    )


def test_seeds_vllm_profile_misses_reasoning_in_a_field_it_does_not_read():
    """vLLM 0.32 streams `reasoning`; a reader of `reasoning_content` only (SGLang's field)
    would see none: each profile reads its own engine's field."""
    transport = replaying(
        "vllm-cpu-smollm2-reasoning-ngram.sse", "vllm-cpu-smollm2-reasoning-ngram.json"
    )
    got = asker_for("qwen36-27b-sglang-mtp", transport).stream("Q", answer_tokens=256)
    assert (
        got.reasoning == ""
        and "no reasoning text" in reasoning_problems(got.reasoning, got.content)[0]
    )


def test_an_error_status_is_the_checks_evidence_not_a_traceback():
    """llama-server started with --no-jinja answers a request offering tools with 500 and a
    message (its error body's shape, as the live test sees it:
    tests/e2e/test_model_kinds_e2e.py::test_tool_calls_on_llama_server_without_jinja_...);
    a check that fails on a refusal gets the status and the message, streamed or not."""
    error = {"error": {"code": 500, "message": "tools param requires --jinja flag"}}
    transport = httpx.MockTransport(lambda request: httpx.Response(500, json=error))
    asker = asker_for("llamacpp-smollm2-chat", transport)
    plain, why = asker.answer_or_error("Weather?", stream=False, answer_tokens=8, tools=[])
    assert plain is None and why == "HTTP 500: tools param requires --jinja flag"
    streamed, why = asker.answer_or_error("Weather?", stream=True, answer_tokens=8, tools=[])
    assert why is not None and "500" in why, (streamed, why)
