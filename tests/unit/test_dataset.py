"""Dataset prompts: the ShareGPT-style reader (its errors name file and line), the
shipped dataset, and prompts drawn from it with their replies' lengths; length spreads."""

from __future__ import annotations

import json

import pytest

from perfgate.errors import WorkloadError
from perfgate.workload.conversations import conversation_prompts, dataset_prompts, drawn_lengths
from perfgate.workload.dataset import load_conversations, shipped_names
from tests.unit.test_workload import UnevenTokenizer


def _line(*turns: tuple[str, str]) -> str:
    return json.dumps({"conversations": [{"from": f, "value": v} for f, v in turns]})


def test_reads_sharegpt_and_openai_role_names_and_skips_what_cannot_be_sent(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        "\n".join(
            [
                _line(("system", "be nice"), ("human", "hi"), ("gpt", "hello"), ("human", "bye")),
                "",
                _line(("user", "q"), ("assistant", "a"), ("user", "q2"), ("assistant", "a2")),
                _line(("gpt", "a reply with no question")),
            ]
        )
    )
    conversations = load_conversations("d.jsonl", tmp_path)
    assert [[(t.user, t.reply) for t in c.turns] for c in conversations] == [
        [("hi", "hello")],
        [("q", "a"), ("q2", "a2")],
    ]
    array = tmp_path / "a.json"
    array.write_text(json.dumps([json.loads(_line(("human", "x"), ("gpt", "y")))]))
    assert load_conversations(str(array), tmp_path)[0].turns[0].reply == "y"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"conversations": [}', r"d.jsonl:2: not valid JSON"),
        ('{"messages": []}', r"d.jsonl:2: expected an object with a 'conversations' list"),
        ('{"conversations": [{"from": "robot", "value": "x"}]}', r"from='robot'"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(tmp_path, text, message):
    (tmp_path / "d.jsonl").write_text(_line(("human", "a"), ("gpt", "b")) + "\n" + text)
    with pytest.raises(WorkloadError, match=message):
        load_conversations("d.jsonl", tmp_path)


def test_missing_files_and_unknown_shipped_names_say_what_exists(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read dataset"):
        load_conversations("nope.jsonl", tmp_path)
    with pytest.raises(WorkloadError, match="shipped: perfgate:conversations"):
        load_conversations("perfgate:nope", tmp_path)


def test_the_shipped_dataset_has_real_replies_of_many_lengths_and_multi_turn_talks(tmp_path):
    assert "perfgate:conversations" in shipped_names()
    conversations = load_conversations("perfgate:conversations", tmp_path)
    assert len(conversations) >= 100
    words = sorted(len(c.turns[0].reply.split()) for c in conversations)
    assert words[0] < 40 and words[-1] > 150  # short and long replies
    prompts = sorted(len(c.turns[0].user.split()) for c in conversations)
    assert prompts[0] < 10 and prompts[-1] > 300  # short questions and long notes
    assert sum(len(c.turns) > 1 for c in conversations) >= 25


def test_prompts_are_drawn_seeded_with_their_replies_lengths_capped(tmp_path):
    conversations = load_conversations("perfgate:conversations", tmp_path)
    tok = UnevenTokenizer()
    counted: dict[str, tuple[int, int]] = {}
    a = dataset_prompts(
        tok, conversations, 40, seed=1, max_input=200, max_output=100, counted=counted
    )
    assert a == dataset_prompts(
        tok, conversations, 40, seed=1, max_input=200, max_output=100, counted=counted
    )
    assert all(p.tokens == tok.count(p.text) <= 200 for p in a)
    replies: dict[str, set[int]] = {}  # a templated question may recur, answered anew
    for c in conversations:
        length = tok.count(c.turns[0].reply) - tok.count("")
        replies.setdefault(c.turns[0].user, set()).add(min(length, 100))
    assert all(p.output_len in replies[p.text] for p in a)
    assert len({p.output_len for p in a}) > 5  # lengths vary as the replies do
    with pytest.raises(WorkloadError, match="too few prompts of at most 3 tokens"):
        dataset_prompts(tok, conversations, 5, seed=1, max_input=3, max_output=9, counted={})


def test_drawn_lengths_spread_uniformly_and_stay_exact_without_a_ratio():
    assert drawn_lengths(7, 5, 128, 0.0) == [128] * 5
    lengths = drawn_lengths(7, 20_000, 100, 0.5)
    assert min(lengths) == 50 and max(lengths) == 150
    assert abs(sum(lengths) / len(lengths) - 100) < 0.5  # uniform: mean 100, sd 29 / sqrt(n)
    assert drawn_lengths(7, 100, 10, 0.9, floor=8) == drawn_lengths(7, 100, 10, 0.9, floor=8)
    assert min(drawn_lengths(7, 100, 10, 0.9, floor=8)) >= 8


def test_conversations_are_replayed_turn_after_turn_with_their_history(tmp_path):
    conversations = load_conversations("perfgate:conversations", tmp_path)
    tok = UnevenTokenizer()
    prompts = conversation_prompts(tok, conversations, 60, seed=4, max_output=64, counted={})
    assert len(prompts) == 60
    assert prompts == conversation_prompts(
        tok, conversations, 60, seed=4, max_output=64, counted={}
    )
    by_first = {c.turns[0].user: c for c in conversations}
    i = turns = 0
    while i < len(prompts):  # each conversation: its turns in order, each resending the ones before
        assert prompts[i].history == ()
        candidates = [c for c in conversations if c.turns[0].user == prompts[i].text]
        k = 1
        while i + k < len(prompts) and prompts[i + k].history:
            k += 1
        assert any(
            len(c.turns) >= k
            and all(
                p.text == c.turns[j].user
                and p.history == tuple((t.user, t.reply) for t in c.turns[:j])
                for j, p in enumerate(prompts[i : i + k])
            )
            for c in candidates
        ), prompts[i].text
        turns = max(turns, k)
        i += k
    assert turns >= 2 and by_first
    assert all(1 <= p.output_len <= 64 for p in prompts)


def test_history_goes_out_as_messages_or_as_one_transcript():
    from perfgate.client import request_body

    chat = request_body("chat", "m", "and now?", 8, (("hi", "hello"), ("why", "because")))
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "why"),
        ("assistant", "because"),
        ("user", "and now?"),
    ]
    text = request_body("completions", "m", "and now?", 8, (("hi", "hello"),))
    assert text["prompt"] == "hi\n\nhello\n\nand now?"
    assert request_body("chat", "m", "x", 8)["messages"] == [{"role": "user", "content": "x"}]
