"""The ``Backend`` handle every launcher returns, and readiness polling they share."""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx

from perfgate.engines import Engine
from perfgate.errors import AccessRefused, BackendStartError, ReadinessTimeout
from perfgate.profile import redact_text

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class Backend(Protocol):
    """A running (or attached) server that perfgate can measure."""

    base_url: str
    headers: dict[str, str]  # sent with every request: the API key, a gateway's headers
    engine: Engine
    owned: bool  # True when perfgate started it and must stop it
    argv: list[str]  # the command that started it ([] when attached)

    def logs(self) -> str:
        """Everything the server has logged so far ('' when unknown)."""
        ...

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the log."""
        ...

    def alive(self) -> bool:
        """Whether the server process is still running."""
        ...

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited."""
        ...

    def wait_ready(
        self, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        """Block until the server answers health and one real generated token."""
        ...

    def stop(self) -> None:
        """Stop the server if perfgate started it; idempotent."""
        ...

    def hardware(self) -> dict[str, object]:
        """What the server runs on, probed where it runs (once; later calls return a copy
        of the first answer): see ``perfgate.launch.hardware``. ``key`` is "" where it
        cannot be known (a remote attached server, a failed probe)."""
        ...


POLL_INTERVAL_S = 0.25


def wait_until_ready(
    backend: Backend,
    model: str,
    timeout_s: float,
    *,
    where: str,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    interval_s: float = POLL_INTERVAL_S,
) -> None:
    """Poll until the server answers health and a real token; check on every poll that it
    is still running, so a crash during start is reported at once with its exit code and
    log tail. ``where`` names the log (a path, a container, a remote file) in messages."""
    deadline = clock() + timeout_s
    name = backend.engine.name
    with httpx.Client(
        base_url=backend.base_url,
        timeout=httpx.Timeout(5.0, read=30.0),
        headers=backend.headers,
    ) as c:
        while True:
            if not backend.alive():
                code = backend.exit_code()
                log = backend.log_tail(30)
                raise BackendStartError(
                    f"{name} server exited with code {code} while starting ({where}). "
                    f"Last log lines:\n{log}",
                    exit_code=code,
                    log_tail=log,
                )
            last = probe_ready(c, backend.engine, model)
            if last is None:
                return
            if clock() >= deadline:
                log = backend.log_tail(30)
                raise ReadinessTimeout(
                    f"{name} server at {backend.base_url} not ready after {timeout_s:.0f}s "
                    f"(last probe: {last}; raise timeouts.startup_s in the profile if it is "
                    f"just slow). {where}, last lines:\n{log}",
                    log_tail=log,
                )
            sleep(interval_s)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


_live: weakref.WeakSet[_Stoppable] = weakref.WeakSet()


def register_live(backend: _Stoppable) -> None:
    """Remember a started backend, so it is stopped at exit if its owner forgot, and make
    SIGTERM run that cleanup in scripts (pytest's plugin handles SIGTERM itself)."""
    _live.add(backend)
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def forget_live(backend: _Stoppable) -> None:
    """The backend was stopped."""
    _live.discard(backend)


@atexit.register
def _stop_leftovers() -> None:  # last resort if a caller forgot stop()
    for backend in list(_live):
        backend.stop()


def refuse_if_unauthorized(response: httpx.Response, client: httpx.Client) -> None:
    """Raise :class:`AccessRefused`, saying what to set, when the server answered 401/403."""
    if response.status_code not in (401, 403):
        return
    sent = "Authorization" in client.headers
    raise AccessRefused(
        f"the server at {client.base_url} answered {response.status_code} to "
        f"{response.request.url.path}: "
        + (
            "it refused the API key perfgate sent (server.api_key_env in the profile): "
            "check that the variable holds the key the server was started with"
            if sent
            else "it wants an API key (a server started with --api-key). Name the "
            'variable that holds it in the profile, server.api_key_env = "VLLM_API_KEY", '
            "and export it; other headers go in server.headers"
        )
    )


def probe_ready(client: httpx.Client, engine: Engine, model: str) -> str | None:
    """One readiness probe. Returns None when ready, else why not (for the timeout message).

    Ready means: the engine's health path answers 200 (where it has one) and a real
    completion returns at least one generated token. A 401 or 403 is final: waiting does
    not bring a key (:class:`AccessRefused`).
    """
    try:
        if engine.health_path:
            health = client.get(engine.health_path)
            refuse_if_unauthorized(health, client)
            if health.status_code != 200:
                return f"{engine.health_path} answered {health.status_code}"
        gen = client.post(
            "/v1/completions",
            json={"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
        )
        refuse_if_unauthorized(gen, client)
        if gen.status_code != 200:
            return f"/v1/completions answered {gen.status_code}: {gen.text[:200]}"
        usage = gen.json().get("usage") or {}
        if int(usage.get("completion_tokens", 0)) < 1:
            return "/v1/completions returned no generated token"
    except (httpx.HTTPError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


LOG_READ_CAP = 4 << 20  # bytes kept from each end of a long log


def read_log(path: Path, cap: int = LOG_READ_CAP) -> str:
    """A server log with secret-looking values redacted; of a log longer than twice
    ``cap``, the first and last ``cap`` bytes (startup facts and recent lines)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            if size <= 2 * cap:
                data = handle.read()
            else:
                head = handle.read(cap)
                handle.seek(size - cap)
                data = head + b"\n[... log cut ...]\n" + handle.read()
    except FileNotFoundError:
        return ""
    return redact_text(data.decode("utf-8", errors="replace"))


def tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])
