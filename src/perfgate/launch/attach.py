"""Attach to a server that is already running (``--perf-base-url``). Never stops it."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from perfgate.engines import Engine
from perfgate.errors import ReadinessTimeout
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.launch.base import Clock, Sleep, probe_ready, read_log, tail
from perfgate.launch.hardware import describe_local_hardware, is_this_machine

POLL_INTERVAL_S = 0.5


class AttachedBackend:
    """A server perfgate did not start: no process, read-only. Its log is read only where
    the user names the file (``--perf-server-log``), for diagnosis.

    ``env`` is the environment the server is taken to have been given (default: this
    process's), for its CUDA_VISIBLE_DEVICES when the server runs on this machine: the
    real server's environment is not known."""

    owned = False

    def __init__(
        self,
        base_url: str,
        *,
        engine: Engine,
        model: str,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        headers: dict[str, str] | None = None,
        clients: HttpClients = NETWORK,
    ) -> None:
        self.clients = clients  # how it is reached (tests: an injected transport)
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.engine = engine
        self.model = model
        self.log_path = log_path
        self.argv: list[str] = []
        self.env = dict(os.environ if env is None else env)
        self._hardware: dict[str, object] | None = None

    def logs(self) -> str:
        return read_log(self.log_path) if self.log_path else ""

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.logs(), lines)

    def alive(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def wait_ready(
        self, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        deadline = clock() + timeout_s
        with self.clients.client(self.base_url, timeout=10.0, headers=self.headers) as client:
            while (why := probe_ready(client, self.engine, self.model)) is not None:
                if clock() >= deadline:
                    raise ReadinessTimeout(
                        f"server at {self.base_url} not ready after {timeout_s:.0f}s: {why}. "
                        "Check the URL given to --perf-base-url.",
                        log_tail="",
                    )
                sleep(POLL_INTERVAL_S)

    def hardware(self) -> dict[str, object]:
        """This machine's description (source "local (attached)") when the URL's host is
        this machine; else ``{"key": "", "source": "remote", "host": host}``: perfgate
        cannot probe a host it did not start the server on, and the caller decides."""
        if self._hardware is None:
            host = urlparse(self.base_url).hostname or ""
            if is_this_machine(host):
                self._hardware = describe_local_hardware(self.env, source="local (attached)")
            else:
                self._hardware = {"key": "", "source": "remote", "host": host}
        return copy.deepcopy(self._hardware)

    def stop(self) -> None:
        """Nothing to do: perfgate does not stop what it did not start."""
