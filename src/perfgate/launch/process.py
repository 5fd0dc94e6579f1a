"""Launch the server as a local subprocess in its own process group."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import httpx

from perfgate.engines import Engine
from perfgate.errors import BackendError, BackendStartError, ReadinessTimeout
from perfgate.launch.base import Clock, Sleep, probe_ready, read_log, tail
from perfgate.profile import Profile, redact_argv

POLL_INTERVAL_S = 0.25
OWNER_ENV = "PERFGATE_OWNER"  # set in every server we start, so tests can find leftovers

_live: weakref.WeakSet[ProcessBackend] = weakref.WeakSet()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class ProcessBackend:
    """A server started by perfgate as a subprocess; its own process group, log in a file."""

    owned = True

    def __init__(
        self,
        argv: list[str],
        *,
        engine: Engine,
        model: str,
        host: str,
        port: int,
        log_path: Path,
        env: dict[str, str] | None = None,
        stop_grace_s: float = 10.0,
        owner: str = "perfgate",
    ) -> None:
        self.engine = engine
        self.model = model
        self.argv = argv
        self.base_url = f"http://{host}:{port}"
        self.log_path = log_path
        self.stop_grace_s = stop_grace_s
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if port_in_use(host, port):
            raise BackendError(
                f"port {port} on {host} is already in use; set server.port = 0 in the "
                "profile to pick a free port, or stop what listens there"
            )
        full_env = {**os.environ, **(env or {}), OWNER_ENV: owner}
        with open(log_path, "wb") as log:
            log.write(f"$ {' '.join(redact_argv(argv))}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=full_env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise BackendStartError(
                    f"could not execute {argv[0]}: {exc}", exit_code=None, log_tail=""
                ) from exc
        self.pgid = self._proc.pid  # start_new_session makes the child its group leader
        _live.add(self)
        _exit_on_sigterm()

    @property
    def pid(self) -> int:
        """The server's pid (also its process group id)."""
        return self._proc.pid

    def logs(self) -> str:
        return read_log(self.log_path)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.logs(), lines)

    def alive(self) -> bool:
        return self._proc.poll() is None

    def exit_code(self) -> int | None:
        return self._proc.poll()

    def wait_ready(
        self, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        deadline = clock() + timeout_s
        last = "no probe yet"
        with httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(5.0, read=30.0)) as c:
            while True:
                if not self.alive():
                    code = self.exit_code()
                    raise BackendStartError(
                        f"{self.engine.name} server exited with code {code} while starting "
                        f"(log: {self.log_path}). Last log lines:\n{self.log_tail(30)}",
                        exit_code=code,
                        log_tail=self.log_tail(30),
                    )
                last = probe_ready(c, self.engine, self.model) or ""
                if not last:
                    return
                if clock() >= deadline:
                    raise ReadinessTimeout(
                        f"{self.engine.name} server at {self.base_url} not ready after "
                        f"{timeout_s:.0f}s (last probe: {last}; raise timeouts.startup_s in "
                        f"the profile if it is just slow). Log {self.log_path}, last lines:\n"
                        f"{self.log_tail(30)}",
                        log_tail=self.log_tail(30),
                    )
                sleep(POLL_INTERVAL_S)

    def stop(self) -> None:
        """SIGTERM the whole process group, then SIGKILL it after the grace period."""
        _live.discard(self)
        if self._signal_group(signal.SIGTERM):
            deadline = time.monotonic() + self.stop_grace_s
            while time.monotonic() < deadline and self._group_exists():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=0.1)
            self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def _group_exists(self) -> bool:
        if self._proc.poll() is None:
            return True
        try:
            os.killpg(self.pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _signal_group(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def launch_process(
    profile: Profile, engine: Engine, log_dir: Path, *, owner: str = "perfgate"
) -> ProcessBackend:
    """Start the profile's server locally (not yet waited for: call ``wait_ready``)."""
    host = profile.server.host
    port = profile.server.port or free_port(host)
    argv = engine.launch_command(profile, host, port)
    return ProcessBackend(
        argv,
        engine=engine,
        model=profile.model.name,
        host=host,
        port=port,
        log_path=log_dir / f"{profile.name}-{port}.log",
        env=dict(profile.server.env),
        stop_grace_s=profile.timeouts.stop_grace_s,
        owner=owner,
    )


def _exit_on_sigterm() -> None:
    """Make SIGTERM run atexit cleanup, where nobody else handles it (scripts, not pytest)."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


@atexit.register
def _stop_leftovers() -> None:  # last resort if a caller forgot stop()
    for backend in list(_live):
        backend.stop()
