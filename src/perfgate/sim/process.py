"""Run the simulator as a subprocess in its own process group, so it shares neither the
client's event loop nor its GIL, and read its ground-truth records."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from perfgate.sim.config import SimConfig
from perfgate.sim.records import SimRecord

_READY = re.compile(r"perfgate-sim listening on (http://\S+)")
_WORKER = re.compile(r"perfgate-sim worker (\d+) pid (\d+) control on (http://\S+)")
_SRC = str(Path(__file__).resolve().parents[2])  # the directory that holds perfgate/
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SimStartError(RuntimeError):
    """The simulator did not become ready; carries its exit code and log tail."""

    def __init__(self, message: str, *, exit_code: int | None, log_tail: str) -> None:
        super().__init__(f"{message} (exit code {exit_code}); log tail:\n{log_tail}")
        self.exit_code = exit_code
        self.log_tail = log_tail


def _call(method: str, url: str, timeout_s: float) -> Any:
    data = b"{}" if method == "POST" else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with _NO_PROXY.open(request, timeout=timeout_s) as reply:
        return json.loads(reply.read())


def fetch_records(base_url: str, timeout_s: float = 30.0) -> list[SimRecord]:
    """The simulator's records (``GET /sim/records``), synchronously."""
    body = _call("GET", f"{base_url}/sim/records", timeout_s)
    return [SimRecord.from_dict(item) for item in body["records"]]


def reset_records(base_url: str, timeout_s: float = 10.0) -> None:
    """Clear the simulator's records and restart its arrival index (``POST /sim/reset``)."""
    _call("POST", f"{base_url}/sim/reset", timeout_s)


class SimProcess:
    """``python -m perfgate.sim`` as a context manager.

    ::

        with SimProcess(SimConfig(ttft_s=0.1, itl_s=0.02)) as sim:
            ...  # requests to sim.base_url
            records = sim.records()

    Output goes to ``log_path`` (a temporary file by default, removed on stop); the ready
    line is read from it. Stopping sends SIGTERM to the process group, then SIGKILL after
    ``stop_timeout_s``. ``workers`` > 1 serves the port from that many processes (see
    :mod:`perfgate.sim.__main__`); :meth:`records` then merges theirs.
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: Path | None = None,
        ready_timeout_s: float = 20.0,
        stop_timeout_s: float = 5.0,
        python: str = sys.executable,
        workers: int = 1,
    ) -> None:
        self.config = config or SimConfig()
        self.workers = workers
        self.host = host
        self.port = port
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.python = python
        self._own_log = log_path is None
        self.log_path = log_path  # a temporary file from start() when None
        self._proc: subprocess.Popen[bytes] | None = None
        self._url: str | None = None
        self._controls: list[str] = []  # each worker's own URL, with workers > 1
        self.worker_pids: list[int] = []
        self.exit_code: int | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` once started."""
        if self._url is None:
            raise RuntimeError("the simulator is not running; use it as a context manager")
        return self._url

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process group id) while it runs."""
        return None if self._proc is None else self._proc.pid

    def argv(self) -> list[str]:
        """The command line that starts the simulator."""
        where = ["--host", self.host, "--port", str(self.port)]
        if self.workers != 1:
            where += ["--workers", str(self.workers)]
        return [
            self.python,
            "-m",
            "perfgate.sim",
            *where,
            "--config",
            json.dumps(self.config.to_dict()),
        ]

    def start(self) -> Self:
        """Start the server and wait for its ready line."""
        if self._proc is not None:
            raise RuntimeError("the simulator is already running")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, env.get("PYTHONPATH")) if p)
        if self.log_path is None or self._own_log:
            fd, name = tempfile.mkstemp(prefix="perfgate-sim-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            output = self.log()
            match = _READY.search(output)
            if match:
                self._url = match.group(1)
                found = _WORKER.findall(output)
                self.worker_pids = [int(pid) for _, pid, _ in found]
                self._controls = [url for _, _, url in found]
                return self
            code = self._proc.poll()
            if code is not None or time.monotonic() > deadline:
                tail = self.log()[-3000:]
                self.stop()
                why = "exited while starting" if code is not None else "did not become ready"
                raise SimStartError(
                    f"perfgate-sim {why} within {self.ready_timeout_s:.0f}s",
                    exit_code=code,
                    log_tail=tail,
                )
            time.sleep(0.02)

    def log(self) -> str:
        """Everything the server printed so far."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def records(self) -> list[SimRecord]:
        """The server's ground-truth records (every worker's, in arrival order)."""
        if not self._controls:
            return fetch_records(self.base_url)
        merged = [record for url in self._controls for record in fetch_records(url)]
        return sorted(merged, key=lambda record: record.arrival)

    def reset(self) -> None:
        """Clear the records and restart the arrival index (every worker's)."""
        for url in self._controls or [self.base_url]:
            reset_records(url)

    def stop(self) -> int | None:
        """Stop the process group (SIGTERM, then SIGKILL); returns the exit code."""
        proc, self._proc, self._url, self._controls = self._proc, None, None, []
        if proc is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self.exit_code = proc.wait()
            if self._own_log and self.log_path is not None:
                self.log_path.unlink(missing_ok=True)
        return self.exit_code

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
