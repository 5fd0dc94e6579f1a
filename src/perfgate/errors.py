"""perfgate's exception tree.

Every error a user can cause is a subclass of :class:`PerfgateError` whose message
says what to do next::

    PerfgateError
    ├── ProfileError            a profile is missing, malformed or invalid
    ├── BaselineError           a baseline file is missing, malformed or invalid
    ├── BackendError            the serving backend could not be used
    │   ├── BackendStartError   the server exited while starting (exit code + log tail)
    │   ├── ReadinessTimeout    the server did not become ready in time (log tail)
    │   ├── AccessRefused       the server refused perfgate's credentials (401/403)
    │   └── EngineUnavailable   the engine's binary or model is not installed
    ├── WorkloadError           prompts of the requested shape could not be built
    └── SandboxUnavailable      no OS isolation for generated code, and no leave to go without
"""

from __future__ import annotations


class PerfgateError(Exception):
    """Base of every error perfgate raises on purpose."""


class ProfileError(PerfgateError):
    """A profile file is missing, is not valid TOML, or fails validation."""


class BaselineError(PerfgateError):
    """A baseline file is missing, is not valid JSON, or fails validation."""


class BackendError(PerfgateError):
    """The backend could not be started, reached or used."""


class BackendStartError(BackendError):
    """The server process exited before it became ready."""

    def __init__(self, message: str, *, exit_code: int | None, log_tail: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.log_tail = log_tail


class ReadinessTimeout(BackendError):
    """The server stayed alive but never answered health and a first token in time."""

    def __init__(self, message: str, *, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


class AccessRefused(BackendError):
    """The server answered 401 or 403: it wants an API key (or other headers) that perfgate
    did not send, or refused the one it sent."""


class EngineUnavailable(BackendError):
    """The engine binary or model the profile needs is not installed."""


class WorkloadError(PerfgateError):
    """Prompts of the requested token length could not be built against this server."""


class SandboxUnavailable(PerfgateError):
    """Generated code would run without OS isolation, which the profile does not allow."""
