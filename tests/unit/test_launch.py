"""The process launcher with stand-in processes: crash at start, timeout, group cleanup.

The real llama-server goes through the same paths in test_engine_llamacpp.py.
"""

import os
import re
import sys
import time

import pytest

from perfgate.engines import OpenAICompatible
from perfgate.errors import BackendError, BackendStartError, ReadinessTimeout
from perfgate.launch import ProcessBackend, free_port
from tests.helpers import living


def backend(tmp_path, code, port=None, grace=10.0):
    return ProcessBackend(
        [sys.executable, "-c", code],
        engine=OpenAICompatible(),
        model="m",
        host="127.0.0.1",
        port=port or free_port(),
        log_path=tmp_path / "s.log",
        stop_grace_s=grace,
    )


def gone(pid):
    return not living([pid])


def test_crash_during_start_reports_exit_code_and_log_tail_fast(tmp_path):
    b = backend(tmp_path, "import sys; print('error: unknown argument --bogus'); sys.exit(3)")
    t0 = time.monotonic()
    with pytest.raises(BackendStartError) as err:
        b.wait_ready(60)
    assert time.monotonic() - t0 < 5
    assert err.value.exit_code == 3
    assert "unknown argument --bogus" in err.value.log_tail
    assert "exited with code 3" in str(err.value) and "unknown argument" in str(err.value)
    b.stop()


def test_readiness_timeout_uses_injected_clock_and_shows_log(tmp_path):
    b = backend(tmp_path, "import time; print('loading weights', flush=True); time.sleep(60)")
    now = [0.0]

    def clock():
        return now[0]

    def sleep(s):
        now[0] += 10.0
        time.sleep(0.05)

    try:
        with pytest.raises(ReadinessTimeout) as err:
            b.wait_ready(30, clock=clock, sleep=sleep)
        assert "not ready after 30s" in str(err.value)
        assert "loading weights" in err.value.log_tail or "loading weights" in b.logs()
    finally:
        b.stop()
    assert not b.alive()


def test_stop_kills_the_whole_group_even_a_child_that_ignores_sigterm(tmp_path):
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(1, flush=True); time.sleep(60)'])\n"
        "print('CHILDPID', child.pid, 'END', flush=True)\n"
        "time.sleep(60)\n"
    )
    b = backend(tmp_path, code, grace=1.0)
    deadline = time.monotonic() + 10
    while not (found := re.search(r"CHILDPID (\d+) END", b.logs())):
        assert time.monotonic() < deadline, b.logs()
        time.sleep(0.05)
    child_pid = int(found.group(1))
    time.sleep(0.3)  # let the child install its SIGTERM handler
    b.stop()
    time.sleep(0.2)
    assert not b.alive()
    assert gone(child_pid)
    b.stop()  # idempotent


def test_port_in_use_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(BackendError, match=f"port {port} on 127.0.0.1 is already in use"):
            backend(tmp_path, "pass", port=port)


def test_missing_executable_is_a_start_error(tmp_path):
    with pytest.raises(BackendStartError, match="could not execute"):
        ProcessBackend(
            ["/nonexistent/llama-server"],
            engine=OpenAICompatible(),
            model="m",
            host="127.0.0.1",
            port=free_port(),
            log_path=tmp_path / "x.log",
        )


def test_log_goes_to_a_file_with_the_command_line(tmp_path):
    b = backend(tmp_path, "print('hello from server')")
    b._proc.wait(10)
    assert (tmp_path / "s.log").read_text().startswith("$ ")
    assert "hello from server" in b.log_tail(5)


def script_with_a_server(tmp_path):
    """A Python script that launches a stand-in server and waits: (its process, the
    server's pid)."""
    import subprocess

    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from perfgate.engines import OpenAICompatible\n"
        "from perfgate.launch import ProcessBackend, free_port\n"
        "b = ProcessBackend([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "    engine=OpenAICompatible(), model='m', host='127.0.0.1', port=free_port(),\n"
        f"    log_path=Path({str(tmp_path / 'x.log')!r}), stop_grace_s=2)\n"
        "print(b.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def test_a_script_killed_with_sigterm_stops_its_servers(tmp_path):
    proc, server_pid = script_with_a_server(tmp_path)
    proc.terminate()
    proc.wait(15)
    time.sleep(0.2)
    assert gone(server_pid)


def test_a_script_killed_with_sigkill_still_stops_its_servers(tmp_path):
    """SIGKILL runs no cleanup (a CI runner's hard kill, the OOM killer, Ray reaping a lost
    node's workers): the server's parent-death signal stops it all the same."""
    proc, server_pid = script_with_a_server(tmp_path)
    time.sleep(0.5)
    assert not gone(server_pid)
    proc.kill()
    proc.wait(15)
    deadline = time.monotonic() + 10
    while not gone(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not gone(server_pid):
        os.kill(server_pid, 9)  # by pid: do not leave it running even when the test fails
        pytest.fail("the server outlived the SIGKILLed script that started it")
