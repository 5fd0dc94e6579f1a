"""Whole runs through the session on an injected transport (``httpx.MockTransport``, a
llama-server stand-in: tests/mock_llamacpp.py): no socket is opened and no process
starts. Recording, repeats, the early abort, a MISSING figure and TOO NOISY, each with its
exit code, as `pytest -m perf` would end (the same session code ends both)."""

from __future__ import annotations

import socket

import pytest

from perfgate.errors import BackendError, ProfileError
from perfgate.gate.policy import GateExit
from perfgate.profile import load_profile
from perfgate.run.session import PerfgateSession
from perfgate.run.settings import GateOptions
from tests.helpers import ROOT
from tests.mock_llamacpp import MockLlamaServer

URL = "http://mock.test:8080"  # never resolved: every request goes to the mock


@pytest.fixture(autouse=True)
def no_socket(monkeypatch):
    """Any connection attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a socket was opened: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _profile(more: dict | None = None, **gate):
    profile = load_profile("llamacpp-gemma3-270m", ROOT / "profiles")
    workload = profile.workload.model_copy(
        update={"input_len": 16, "output_len": 8, "levels": [2], "rounds": 2,
                "single_requests": 3, "warmup": 1, "client_processes": 1}
    )  # fmt: skip
    settings = {"repeats": 3, "record_repeats": 4, "max_extra_repeats": 2, **gate}
    return profile.model_copy(
        update={
            "workload": workload,
            "gate": profile.gate.model_copy(update=settings),
            **(more or {}),
        }
    )


def _session(tmp_path, server, *, update=False, name="gate", said=None, more=None, **gate):
    return PerfgateSession(
        _profile(more, **gate),
        root=ROOT,
        baselines_dir=tmp_path / "baselines",
        output_dir=tmp_path / name,
        base_url=URL,
        update_baselines=update,
        options=GateOptions(hardware="mock-host"),
        progress=said.append if said is not None else (lambda _: None),
        transport=server.transport,
    )


def _run(session, measurements=("single", "sweep")):
    """The perf suite's measurements, each gated, then the end: (gated, outcome)."""
    w = session.profile.workload
    gated = {}
    session.perf_selected = True
    for name in measurements:
        assert session.refusal() is None
        if name == "single":
            session.measure_single("single", w.single_requests)
        elif name == "sweep":
            session.measure("sweep", w.levels, lambda c: int(c) * w.rounds)
        elif name == "rate":
            session.measure("rate", [float(r) for r in w.rates], lambda _: w.rate_requests)
        else:
            session.measure_capacity("capacity")
        gated[name] = session.gate(name)
    failed = any(g.failed for g in gated.values())
    return gated, session.conclude(1 if failed else 0, plots=False)


@pytest.fixture
def recorded(tmp_path):
    """A baseline recorded from the healthy mock (4 runs a level)."""
    server = MockLlamaServer()
    session = _session(tmp_path, server, update=True, name="record")
    _, outcome = _run(session)
    assert outcome.exit_code == 0, outcome.lines
    assert any("baseline written to" in line for line in outcome.lines), outcome.lines
    runs = session.run.measurements["sweep"].by_concurrency()
    assert [len(r) for r in runs.values()] == [4]  # record_repeats, exactly
    assert len(session.run.measurements["single"].levels) == 4
    assert session.run.engine_version == "b1-mock" and server.requests > 20
    return tmp_path


def test_the_same_server_passes_its_own_recording_with_no_socket(recorded):
    server = MockLlamaServer()
    said: list[str] = []
    session = _session(recorded, server, said=said)
    gated, outcome = _run(session)
    assert outcome.exit_code == 0, [g.text for g in gated.values()]
    assert not any(g.failed for g in gated.values())
    verdicts = {c.key: c.verdict for c in session.run.checks}
    assert "sweep.c2.agg_tok_s" in verdicts and set(verdicts.values()) <= {"pass", "improved"}
    for m in session.run.measurements.values():  # from min_repeats (2) up to repeats + 2
        assert all(2 <= len(r) <= 5 for r in m.by_concurrency().values())
    assert session.run.status == "passed" and session.run_path.exists()
    assert {"/health", "/props", "/tokenize", "/metrics", "/v1/completions"} <= set(server.paths)
    assert any("ready at http://mock.test:8080" in line for line in said)


def test_a_server_four_times_slower_stops_the_sweep_early_and_regresses(recorded):
    server = MockLlamaServer(slow=4.0)
    session = _session(recorded, server)
    gated, outcome = _run(session)
    assert outcome.exit_code == GateExit.REGRESSED
    sweep = session.run.measurements["sweep"]
    assert sweep.aborted and len(sweep.levels) == 1  # the early abort: one run, no more
    assert (
        "REGRESSED" in gated["single"].text
        and "single.c1.per_request_tok_s" in gated["single"].text
    )
    assert session.run.diagnosis is not None


def test_a_measurement_not_run_is_missing(recorded):
    session = _session(recorded, MockLlamaServer())
    _, outcome = _run(session, measurements=("single",))
    missing = [c for c in session.run.checks if c.verdict == "missing"]
    assert outcome.exit_code == GateExit.MISSING
    assert missing and all(c.key.startswith("sweep.") for c in missing)
    assert "test deselected" in missing[0].message()


def test_runs_that_disagree_past_the_limit_end_too_noisy(recorded, monkeypatch):
    """The second run of the level 3x slower, the first and third as recorded: one run
    far past the limit, two inside it. Three runs (no extra ones) cannot tell that from
    noise: TOO NOISY, exit 10, nothing called regressed."""
    server = MockLlamaServer()
    session = _session(recorded, server, abort_below=0.0, max_extra_repeats=0)
    closed = session.measurer.closed

    def second_run_slow(window, run, repeat):
        swept = run.concurrency == 2
        server.slow = 3.0 if swept and repeat == 0 else 1.0  # the next run's speed
        return closed(window, run, repeat)

    monkeypatch.setattr(session.measurer, "closed", second_run_slow)
    _, outcome = _run(session)
    verdicts = {c.key: c.verdict for c in session.run.checks if c.key.startswith("sweep.")}
    assert set(verdicts.values()) == {"too-noisy"}, verdicts
    assert outcome.exit_code == GateExit.TOO_NOISY
    assert [len(r) for r in session.run.measurements["sweep"].by_concurrency().values()] == [3]
    noisy = next(c for c in session.run.checks if c.verdict == "too-noisy")
    assert "1 past it beyond noise" in noisy.message() and "noisier" in noisy.message()


def test_request_rates_and_the_capacity_search_run_on_the_mock(tmp_path):
    """An open-loop rate, and a capacity search over a server with 2 slots (a third
    request in flight waits 1.5x for its first token, past the 25 ms TTFT level): the
    search finds 2, three times (recording), and the Markdown summary is written."""
    from perfgate.profile.workload import CapacitySpec, Slo

    profile = _profile()
    rated = {"rates": [40.0], "rate_requests": 6}
    more = {
        "workload": profile.workload.model_copy(update=rated),
        "slo": Slo(ttft_s=0.025),
        "capacity": CapacitySpec(by="concurrency", low=1, high=8, target=0.9),
    }
    server = MockLlamaServer(slots=2)
    session = _session(tmp_path, server, update=True, more=more, record_repeats=3)
    _, outcome = _run(session, measurements=("rate", "capacity"))
    assert outcome.exit_code == 0, outcome.lines
    searches = session.run.measurements["capacity"].searches
    assert len(searches) == 3 and {s.capacity for s in searches} == {2}, searches
    rate = session.run.measurements["rate"].levels
    assert len(rate) == 3 and all(lv.rate == 40.0 for lv in rate)
    summary = tmp_path / "summary.md"
    session.recorder.write_reports(summary_paths=[summary], plots=False)
    assert "capacity" in summary.read_text()


def test_a_server_that_never_gets_ready_fails_once_and_is_not_asked_again(tmp_path):
    server = MockLlamaServer(broken=("/health",))
    profile = _profile()
    timeouts = profile.timeouts.model_copy(update={"startup_s": 0.0})
    session = _session(tmp_path, server, more={"timeouts": timeouts})
    with pytest.raises(BackendError, match="/health answered 500"):
        session.start_backend()
    asked = len(server.paths)
    with pytest.raises(BackendError, match="/health answered 500"):
        session.refusal()  # the same error: no second start
    assert len(server.paths) == asked
    assert any(n.startswith("backend failed:") for n in session.run.notes)
    assert session.conclude(1).exit_code == 1  # pytest's status, kept


def test_golden_outputs_are_recorded_and_a_changed_one_is_named(tmp_path):
    from perfgate.correctness.golden import GoldenOutputs

    def record(outputs: dict[str, str]) -> list[str]:
        session = _session(tmp_path, MockLlamaServer(), update=True, name="golden")
        session.golden_outputs = GoldenOutputs(schema_version=1, max_tokens=4, outputs=outputs)
        _, outcome = _run(session, measurements=("single",))
        return outcome.lines

    first = record({"The capital of France is": " Paris"})
    assert any("1 golden greedy outputs written to" in line for line in first), first
    second = record({"The capital of France is": " Lyon"})
    assert any(line.startswith("perfgate: golden output changed:") for line in second), second


def test_a_server_without_metrics_or_a_twin_says_so_once(tmp_path):
    """/metrics answers 500: the run says once that there are no server metrics (and how
    to get them); a twin asked of an attached server says why it cannot run."""
    server = MockLlamaServer(broken=("/metrics",))
    profile = _profile()
    correctness = profile.correctness.model_copy(update={"twin_profile": "llamacpp-twin"})
    session = _session(tmp_path, server, update=True, more={"correctness": correctness})
    session.twin_request = (["Hello"], 4)
    _run(session, measurements=("single",))
    notes = [n for n in session.run.notes if n.startswith("no server metrics")]
    assert len(notes) == 1 and "--metrics" in notes[0], session.run.notes
    assert "attached (--perf-base-url)" in session.twin_problem()
    with pytest.raises(BackendError, match="cannot stop it"):
        session.twin_outputs()


def test_a_new_plan_runs_on_the_one_loop_with_no_other_change(tmp_path):
    """A plan written here (levels high to low, each once, the last one twice): the
    measurer's one loop measures it through the same window, prompts and saving."""
    from dataclasses import dataclass, field

    from perfgate.run.plans import Step

    @dataclass
    class Descending:
        levels: list[int]
        not_run: list[int | float] = field(default_factory=list)

        def next(self, done):
            order = [*sorted(self.levels, reverse=True), min(self.levels)]
            if len(done) == len(order):
                return None
            level = order[len(done)]
            return Step(level, sum(d.level == level for d in done), requests=2 * level)

    session = _session(tmp_path, MockLlamaServer(), update=True)
    collected = []
    session.measurer.run_plan("descending", Descending([1, 2, 3]), collected)
    assert [(d.level, d.repeat, d.metrics.ok) for d in collected] == [
        (3, 0, 6), (2, 0, 4), (1, 0, 2), (1, 1, 2),
    ]  # fmt: skip
    assert all(d.server is not None for d in collected)  # read through the window


def test_a_new_sampler_is_read_over_each_level_run_with_no_other_change(tmp_path, monkeypatch):
    """A sampler written here (one module's worth: a class and its registration) reading
    the server's generated-token counter through the run's own clients: the window opens
    it as each level run's measured requests start and closes it as they end, so its
    reading is exactly that run's output tokens (the warmup request is outside), kept in
    the level's data and in the run JSON."""
    import re

    from perfgate.measure.samplers import SAMPLERS, WindowSource
    from perfgate.results.run import load_run

    class TokensPredicted:
        part = "tokens"

        def __init__(self, source: WindowSource) -> None:
            self.source = source
            self.before = 0

        def read(self) -> int:
            with self.source.clients.client(self.source.base_url, timeout=5.0) as client:
                text = client.get(self.source.engine.metrics_path or "/metrics").text
            found = re.search(r"^llamacpp:tokens_predicted_total (\d+)", text, re.M)
            assert found, text
            return int(found[1])

        def open(self) -> None:
            self.before = self.read()

        def close(self) -> dict:
            return {"predicted": self.read() - self.before}

        def stop(self) -> None:
            pass

    monkeypatch.setitem(SAMPLERS, "tokens", TokensPredicted)
    session = _session(tmp_path, MockLlamaServer(), update=True)
    session.perf_selected = True
    session.measure("sweep", [1, 2], lambda c: 2 * c)
    levels = session.run.measurements["sweep"].levels
    assert [d.metrics.ok for d in levels] == [2, 2, 2, 2, 4, 4, 4, 4]  # 4 runs a level
    for data in levels:
        output = sum(r.output_tokens for r in data.records)
        assert data.samples == {"tokens": {"predicted": output}}, data.concurrency
    session.save_run()
    stored = load_run(session.run_path).measurements["sweep"].levels
    assert [d.samples for d in stored] == [d.samples for d in levels]


def test_a_new_report_format_is_written_by_the_gated_run(tmp_path, monkeypatch):
    """A format registered here (one module's worth: a Format and register): the gated
    run writes it next to the run JSON when asked (--perf-report NAME), with the shipped
    ones; an unknown name is an error naming the known ones."""
    from perfgate.render.formats import FORMATS, Format, find_format

    def figures(run, context):
        return "\n".join(f"{c.key}={c.verdict}" for c in run.checks) + f"\n{context.run_json}\n"

    monkeypatch.setitem(FORMATS, "figures", Format("figures", "key=verdict lines", figures))
    session = _session(tmp_path, MockLlamaServer(), update=True)
    session.perf_selected = True
    session.measure_single("single", 3)
    session.gate("single")
    outcome = session.conclude(0, plots=False, reports=["figures", "junit"])
    written = session.run_path.with_suffix(".figures")
    assert written.read_text().startswith("single.c1.agg_tok_s=no-baseline"), outcome.lines
    assert session.run_path.with_suffix(".xml").read_text().startswith("<?xml")
    assert any("figures report written to" in line for line in outcome.lines)
    with pytest.raises(ValueError, match=r"no report format 'pdf' \(there are: csv, figures"):
        find_format("pdf")


def test_an_injected_transport_needs_a_server_to_attach_to(tmp_path):
    with pytest.raises(ProfileError, match="needs base_url"):
        PerfgateSession(
            _profile(),
            root=ROOT,
            baselines_dir=tmp_path,
            output_dir=tmp_path,
            transport=MockLlamaServer().transport,
        )
