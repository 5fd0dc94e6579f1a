"""Launch the server as a local subprocess in its own process group."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from perfgate.engines import Engine
from perfgate.errors import BackendError, BackendStartError
from perfgate.launch.base import (
    Clock,
    Sleep,
    forget_live,
    read_log,
    register_live,
    tail,
    wait_until_ready,
)
from perfgate.launch.hardware import describe_local_hardware
from perfgate.launch.lifeline import lifeline
from perfgate.profile import Profile, redact_argv

OWNER_ENV = "PERFGATE_OWNER"  # set in every server we start, so tests can find leftovers


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


def ensure_port_free(host: str, port: int) -> None:
    """Refuse, before starting anything, a port something already listens on."""
    if port_in_use(host, port):
        raise BackendError(
            f"port {port} on {host} is already in use; set server.port = 0 in the "
            "profile to pick a free port, or stop what listens there"
        )


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
        self.headers: dict[str, str] = {}  # set by launch() from the profile
        self.log_path = log_path
        self.stop_grace_s = stop_grace_s
        log_path.parent.mkdir(parents=True, exist_ok=True)
        ensure_port_free(host, port)
        self.env = {**os.environ, **(env or {})}  # the server's environment
        self._hardware: dict[str, object] | None = None
        full_env = {**self.env, OWNER_ENV: owner}
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
                    preexec_fn=lifeline(),  # stops with us even if we are SIGKILLed
                )
            except OSError as exc:
                raise BackendStartError(
                    f"could not execute {argv[0]}: {exc}", exit_code=None, log_tail=""
                ) from exc
        self.pgid = self._proc.pid  # start_new_session makes the child its group leader
        register_live(self)

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
        wait_until_ready(
            self, self.model, timeout_s, where=f"log {self.log_path}", clock=clock, sleep=sleep
        )

    def hardware(self) -> dict[str, object]:
        """This machine as the server sees it: the probe runs with the server's environment,
        so its CUDA_VISIBLE_DEVICES (and the nvidia-smi on its PATH) count."""
        if self._hardware is None:
            self._hardware = describe_local_hardware(self.env)
        return copy.deepcopy(self._hardware)

    def stop(self) -> None:
        """SIGTERM the whole process group, then SIGKILL it after the grace period."""
        forget_live(self)
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
