"""Answers judged request by request under load (issue #43): a workload whose prompts ask
for JSON (``prompts = "structured"``: a response_format) or offer a function
(``"tool-calls"``: tools) has ``schema_valid_rate`` / ``tool_call_valid_rate`` at every
level, gated whenever those prompts are chosen.

The whole runs are on the mock llama-server (tests/mock_llamacpp.py: written from the
documented API; it proves perfgate's logic, nothing about an engine): recorded while every
answer is valid, then gated against a server that ignores response_format (free text), or
whose tool-call parser is off (the call comes back as text in content): the figure falls
from 100% to 0% and the run fails on it. (A real engine's guided decoding under load:
llama.cpp in tests/e2e/test_model_kinds_e2e.py.)"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from perfgate.client import RequestRecord
from perfgate.gate.policy import GateExit
from perfgate.load.workers import RequestPlan
from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import prompt_kind
from tests.mock_llamacpp import MockLlamaServer
from tests.unit.test_run_on_mock import _run, _session, no_socket  # noqa: F401 (autouse)

PARIS = json.dumps({"city": "Paris", "country": "France"})
CALL = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}


def plan(prompts: str) -> RequestPlan:
    workload = WorkloadSpec(api="chat", input_len=8, output_len=32, levels=[1], prompts=prompts)
    return RequestPlan(
        api="chat",
        model="m",
        output_len=32,
        request_timeout_s=10,
        extras=prompt_kind(prompts).request_fields(workload),
    )


def answer(text: str = "", calls=None, finish: str = "stop") -> RequestRecord:
    return RequestRecord(index=0, start=0.0, text=text, tool_calls=calls, finish_reason=finish)


def test_each_answer_is_judged_against_the_schema_its_request_asked():
    structured = plan("structured")
    assert structured.checked(answer(PARIS)).schema_valid is True
    assert structured.checked(answer('{"city": "Paris"}')).schema_valid is False  # no country
    assert structured.checked(answer(" the quick brown fox")).schema_valid is False
    assert structured.checked(answer(PARIS[:-3], finish="length")).schema_valid is False  # cut
    assert structured.checked(answer(PARIS)).tool_call_valid is None  # no tools offered
    failed = answer(PARIS)
    failed.error = "HTTP 500"
    assert structured.checked(failed).schema_valid is None  # a failed request is not judged
    assert plan("random").checked(answer(PARIS)).schema_valid is None  # nothing asked


def test_each_answer_is_judged_a_valid_call_of_an_offered_function_or_not():
    tools = plan("tool-calls")
    called = tools.checked(answer(calls=[{"id": "c", **CALL}], finish="tool_calls"))
    assert called.ok and called.tool_call_valid is True
    wrong_name = {"id": "c", "name": "get_time", "arguments": CALL["arguments"]}
    bad_args = {"id": "c", "name": "get_weather", "arguments": '{"town": "Paris"}'}
    for calls in ([wrong_name], [bad_args]):
        assert tools.checked(answer(calls=calls, finish="tool_calls")).tool_call_valid is False
    as_text = tools.checked(answer(f"<tool_call>{json.dumps(CALL)}</tool_call>"))
    assert as_text.ok and as_text.tool_call_valid is False  # the parser off: text, no call
    assert tools.checked(answer("It is sunny in Paris.")).tool_call_valid is False
    leaked = answer("<tool_call>", calls=[{"id": "c", **CALL}], finish="tool_calls")
    assert tools.checked(leaked).tool_call_valid is False  # call text left in content too
    # finish_reason tool_calls ends a request well only where tools were offered
    assert not plan("random").checked(answer(calls=[{"id": "c", **CALL}], finish="tool_calls")).ok


@pytest.mark.parametrize("prompts", ["structured", "tool-calls"])
def test_prompts_that_ask_for_a_shape_need_chat(prompts):
    with pytest.raises(ValidationError, match=f'prompts = "{prompts}" asks through chat'):
        WorkloadSpec(api="completions", input_len=8, output_len=8, levels=[1], prompts=prompts)


def _chat(prompts: str) -> dict:
    """The mock tests' small workload (one level, C=2), asked through chat in ``prompts``."""
    small = {"input_len": 16, "output_len": 32, "levels": [2], "rounds": 2,
             "single_requests": 3, "warmup": 1, "client_processes": 1}  # fmt: skip
    workload = WorkloadSpec(api="chat", prompts=prompts, **small)
    return {"workload": workload}


@pytest.mark.parametrize(
    ("prompts", "healthy", "broken", "figure"),
    [
        (
            "structured",
            MockLlamaServer(json_answer=PARIS),
            MockLlamaServer(),  # ignores response_format: words
            "schema_valid_rate",
        ),
        (
            "tool-calls",
            MockLlamaServer(tool_call=CALL),
            MockLlamaServer(tool_call=CALL, call_as_text=True),  # its tool parser off
            "tool_call_valid_rate",
        ),
    ],
)
def test_answers_valid_when_recorded_and_invalid_now_fail_the_gate(
    tmp_path, prompts, healthy, broken, figure
):
    more = _chat(prompts)
    record = _session(tmp_path, healthy, update=True, name="record", more=more)
    _, outcome = _run(record, measurements=("sweep",))
    assert outcome.exit_code == 0, outcome.lines
    recorded = record.run.measurements["sweep"].levels
    assert [level.metrics.model_dump()[figure] for level in recorded] == [1.0] * len(recorded)
    assert any(f"sweep.c2.{figure}" in line for line in outcome.lines), outcome.lines

    same = _session(tmp_path, MockLlamaServer(json_answer=PARIS, tool_call=CALL), more=more)
    _, outcome = _run(same, measurements=("sweep",))
    assert outcome.exit_code == 0, outcome.lines

    gate = _session(tmp_path, broken, name="broken", more=more)
    gated, outcome = _run(gate, measurements=("sweep",))
    assert outcome.exit_code == GateExit.REGRESSED, outcome.lines
    check = next(c for c in gate.run.checks if c.key == f"sweep.c2.{figure}")
    assert check.verdict == "regressed" and check.measured == 0.0, check
    assert f"sweep.c2.{figure}" in gated["sweep"].text


@pytest.mark.parametrize("figure", ["schema_valid_rate", "tool_call_valid_rate"])
def test_a_validity_share_takes_no_allowance_for_host_drift(figure):
    """A profile's min_tolerance (25%, for hosts whose tok/s drifts between days) and the
    spread between hosts leave a share of valid answers alone: recorded at 100% in every
    run, one answer in four invalid fails, on the recording's host and on another. The
    same baseline's tok/s keeps both allowances: 20% slower passes there."""
    from perfgate.gate.recording import build_baseline
    from perfgate.gate.verdict import compare
    from perfgate.stats.decide import Rule

    share, speed = f"sweep.c2.{figure}", "sweep.c2.agg_tok_s"
    values = {share: [1.0] * 8, speed: [100.0, 97.0, 103.0, 99.0, 101.0, 98.0, 102.0, 100.5]}
    rule = Rule(3, 10)
    base = build_baseline("p", "h", values, None, {}, rule, min_tolerance=0.25).baseline
    assert base.metrics[speed].tolerance >= 0.25
    assert base.metrics[share].tolerance < 0.05, base.metrics[share]
    for another_host in (False, True):
        one_in_four = compare(
            share, [0.75] * 3, base.metrics[share], rule, another_host=another_host
        )
        assert one_in_four[0].verdict == "regressed", one_in_four[0].message()
        slower = compare(
            speed, [80.0, 80.5, 79.5], base.metrics[speed], rule, another_host=another_host
        )
        assert slower[0].verdict == "pass", slower[0].message()


@pytest.mark.parametrize("figure", ["schema_valid_rate", "tool_call_valid_rate"])
def test_the_summary_of_what_the_gate_catches_gives_a_validity_share_no_host_spread(figure):
    """reach() (the run's "fails a figure N% worse 95% of the time") judges a share of
    valid answers as the gate does: on another host, with no spread between hosts, so its
    smallest detectable drop is the one on the recording's host; a tok/s figure's grows."""
    from perfgate.gate.policy import GatePolicy, reach
    from perfgate.gate.recording import build_baseline
    from perfgate.stats.decide import Rule

    share, speed = f"sweep.c2.{figure}", "sweep.c2.agg_tok_s"
    shares = [1.0, 0.98, 1.0, 0.99, 1.0, 1.0, 0.98, 1.0]
    speeds = [100.0, 97.0, 103.0, 99.0, 101.0, 98.0, 102.0, 100.5]
    for values, grows in (({share: shares}, False), ({speed: speeds}, True)):
        base = build_baseline("p", "h", values, None, {}, Rule(3, 10)).baseline
        here = reach(base, "exact", GatePolicy())
        there = reach(base, "exact", GatePolicy(another_host=True))
        assert here.detectable is not None and there.detectable is not None
        assert (there.detectable > here.detectable) is grows, (values.keys(), here, there)
