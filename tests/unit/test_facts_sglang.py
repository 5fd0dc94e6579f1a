"""SGLang's log parser: on a real SGLang 0.5.23 log (captured on this project's CPU host,
tests/data/logs/sglang-0.5.23-cpu.log), and against variants of the lines of the seeds'
GPU deployment (its fixtures written from SGLang's documented formats: no GPU here,
tests/data/logs/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.engines import SGLang

LOGS = Path(__file__).parents[1] / "data" / "logs"
SERVER_ARGS = re.compile(r"^(.*server_args=ServerArgs\()(.*)(\))$")


def facts_of(text: str) -> dict[str, object]:
    return {k: f.value for k, f in SGLang().log_facts(text).items()}


def server_args_line() -> tuple[str, list[str], str]:
    for line in (LOGS / "sglang-mtp.log").read_text().splitlines():
        if match := SERVER_ARGS.match(line):
            return match[1], re.split(r", (?=\w+=)", match[2]), match[3]
    raise AssertionError("no ServerArgs line")


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_server_args_reordered_or_extended(data: st.DataObject):
    head, fields, tail = server_args_line()
    expected = facts_of(head + ", ".join(fields) + tail)
    varied = data.draw(st.permutations(fields))
    extra = data.draw(
        st.lists(
            st.builds(
                lambda k, v: f"zz_{k}={v}",
                st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
                st.one_of(st.integers().map(str), st.just("None"), st.just("'a, b'")),
            ),
            max_size=4,
            unique_by=lambda f: f.split("=")[0],
        )
    )
    for field in extra:
        varied.insert(data.draw(st.integers(0, len(varied))), field)
    facts = facts_of(head + ", ".join(varied) + tail)
    assert {k: v for k, v in facts.items() if not k.startswith("arg.zz_")} == expected


DECODE = (
    "[2026-11-20 10:01:14 TP0] Decode batch. #running-req: 1, #token: 572, token usage: 0.00,"
    " accept len: 3.18, accept rate: 0.73, cuda graph: True, gen throughput (token/s): 73.10,"
    " #queue-req: 0, "
)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_decode_batch_fields_reordered_or_extended(data: st.DataObject):
    head, _, rest = DECODE.partition("Decode batch. ")
    fields = [f for f in rest.split(", ") if f.strip()]
    varied = data.draw(st.permutations(fields))
    new = data.draw(st.lists(st.from_regex(r"#?[a-z][a-z ]{0,12}: [0-9.]{1,5}", fullmatch=True)))
    for field in new:
        if not re.search(r"accept|graph", field):
            varied.insert(data.draw(st.integers(0, len(varied))), field)
    facts = facts_of(head + "Decode batch. " + ", ".join(varied) + ", ")
    assert facts == {"cuda_graphs": True, "log_mean_accept_len": 3.18, "log_accept_rate": 0.73}


def test_decode_batch_without_the_fields_says_nothing():
    line = "[2026-11-20 10:01:14 TP0] Decode batch. #running-req: 1, #token: 572, "
    assert facts_of(line) == {}


def test_graph_capture_lines():
    begin = "[TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20 GB"
    assert "cuda_graphs" not in facts_of(begin)
    end = "[TP0] Capture cuda graph end. Time elapsed: 21.04 s. mem usage=1.10 GB."
    assert facts_of(end) == {"cuda_graphs": True}
    # a reworded capture line (a later release may name what it captured): still read
    renamed = "[TP0] Capture target decode CUDA graph end. elapsed=16.40 s"
    assert facts_of(renamed) == {"cuda_graphs": True}


def test_facts_of_a_real_sglang_0_5_23_log():
    """0.5.x logs its arguments as a dict (``server_args={...}``), and the KV cache line
    with its dtype before the token count."""
    facts = facts_of((LOGS / "sglang-0.5.23-cpu.log").read_text())
    assert facts["kv_cache_tokens"] == 4096  # --max-total-tokens 4096
    assert facts["max_running_requests"] == 2048
    assert facts["attention_backend"] == "torch_native"
    assert facts["arg.device"] == "cpu" and facts["arg.tp_size"] == 1
    assert facts["cuda_graphs"] is False  # "Decode batch, ... cpu graph: False"
    assert facts["structured_output_backend"] == "xgrammar"  # its --grammar-backend


def test_per_start_values_of_a_real_sglang_log_are_no_facts():
    """SGLang 0.5 logs its own argv (a new port each start) and a random seed: facts that
    would differ on every run, ranked as causes of nothing."""
    facts = facts_of((LOGS / "sglang-0.5.23-cpu.log").read_text())
    for volatile in ("launch_command", "random_seed", "port", "model_path", "tokenizer_path"):
        assert f"arg.{volatile}" not in facts
