"""Run code a model wrote, isolated by the operating system.

**Isolated** (the default): bubblewrap puts the child Python in new user, mount, PID,
network, IPC, UTS and cgroup namespaces, as user ``nobody`` with no capabilities. It sees:

- a read-only ``/usr`` and the interpreter's own prefix, nothing else of the host
  (no home, no ``/etc``, no host ``/tmp``, no credentials);
- a private ``/tmp`` of ``tmp_mb`` MiB (tmpfs) as its working directory, the only
  writable place; the code and its tests are mounted read-only under ``/input``;
- no network (a loopback of its own, down);
- a PID namespace: every process dies with the run. Where a ``pids`` cgroup is
  writable, at most ``max_processes`` processes; otherwise ``RLIMIT_NPROC``, which
  the kernel ignores for root.

Limits kept in both modes: wall and CPU time, address space, file size, no core files,
an empty environment.

**Guard** (only where the profile allows it): an audit hook plus those limits.
CPython's audit hooks are not a sandbox; ``_posixsubprocess.fork_exec`` and
``sqlite3`` bypass it. :func:`run_sandboxed` refuses to fall back to it unless asked."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from perfgate.correctness.isolation import PidsCgroup, bwrap_command, find_isolation, limits
from perfgate.errors import SandboxUnavailable


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What happened to code run in the sandbox, and how it was contained."""

    passed: bool
    returncode: int | None
    timed_out: bool
    output: str
    isolation: str
    run_id: str  # in every sandboxed process's command line


def run_sandboxed(
    code: str,
    tests: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    tmp_mb: int = 64,
    max_processes: int = 16,
    allow_guard: bool = False,
    bwrap: str | None = None,
) -> SandboxResult:
    """Run ``code`` then ``tests`` (asserts) in an isolated child Python.

    Raises :class:`SandboxUnavailable` when no OS isolation works here, unless
    ``allow_guard`` lets the weaker audit-hook guard run the code instead.
    """
    isolation = find_isolation(bwrap)
    if not isolation.available and not allow_guard:
        raise SandboxUnavailable(
            f"generated code was not run: no OS isolation here ({isolation.problem}). Install "
            "bubblewrap, or set correctness.code_sandbox = 'allow-guard' in the profile to "
            "accept the weaker audit-hook guard (not a security boundary)."
        )
    token = f"perfgate-sandbox-{secrets.token_hex(6)}"
    with _workdir() as inputs:
        (inputs / "candidate.py").write_text(code + "\n\n" + tests + "\n", encoding="utf-8")
        if isolation.available:
            assert isolation.bwrap is not None
            cgroup = PidsCgroup(max_processes, token)
            limit = (
                f"at most {max_processes} processes (pids cgroup)"
                if cgroup.path is not None
                else (
                    f"at most {max_processes} processes (RLIMIT_NPROC)"
                    if os.getuid() != 0
                    else "processes not capped (no writable pids cgroup), killed with the run"
                )
            )
            command = bwrap_command(isolation.bwrap, inputs, tmp_mb, token)
            cwd, env, description = inputs, {}, isolation.describe(limit)
        else:
            cgroup = PidsCgroup(max_processes, token)
            (inputs / "guard.py").write_text(_GUARD, encoding="utf-8")
            command = [sys.executable, "-I", "-S", "guard.py", token]
            cwd, env = inputs, {"PATH": "/usr/bin:/bin"}
            description = f"audit-hook guard only, NOT OS isolation ({isolation.problem})"
        try:
            return _run(
                command, cwd, env, timeout_s, memory_mb, max_processes, cgroup, description, token
            )
        finally:
            cgroup.remove()


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="perfgate-sandbox-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _run(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    memory_mb: int,
    max_processes: int,
    cgroup: PidsCgroup,
    isolation: str,
    run_id: str,
) -> SandboxResult:
    cpu = max(1, int(timeout_s))
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: limits(cpu, memory_mb, max_processes, cgroup),
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    rc = proc.returncode
    return SandboxResult(
        passed=not timed_out and rc == 0,
        returncode=rc,
        timed_out=timed_out or rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU),  # bwrap: 128+sig
        output=out.decode(errors="replace")[-4000:],
        isolation=isolation,
        run_id=run_id,
    )


_GUARD = textwrap.dedent(
    """
    import os, sys
    ROOT = os.path.realpath(os.getcwd())
    _WRITE = ("w", "a", "x", "+")
    _BLOCKED = {"socket.connect", "socket.bind", "socket.__new__", "subprocess.Popen",
                "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                "os.kill", "os.killpg", "ctypes.dlopen", "sys.addaudithook"}
    _FS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
           "os.chmod", "os.chown", "os.truncate", "shutil.rmtree", "os.utime"}

    def _inside(path):
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == ROOT or real.startswith(ROOT + os.sep)

    def _hook(event, args):
        if event in _BLOCKED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = any(c in mode for c in _WRITE) or flags & (os.O_WRONLY | os.O_RDWR)
            if writes and not _inside(args[0]):
                raise PermissionError(f"sandbox: writing {args[0]!r} outside the sandbox")
        if event in _FS and args and not all(
            _inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))
        ):
            raise PermissionError(f"sandbox: {event} outside the sandbox")

    sys.addaudithook(_hook)
    del _hook
    exec(compile(open("candidate.py").read(), "candidate.py", "exec"), {"__name__": "candidate"})
    """
)
