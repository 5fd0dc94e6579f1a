"""Ground truth: what the simulator did for each request, on the ``time.perf_counter`` clock.

On Linux ``time.perf_counter`` is CLOCK_MONOTONIC, shared by every process on the host, so
these times compare directly with a client's ``perf_counter`` timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

Outcome = Literal["running", "ok", "fault", "client_closed"]


@dataclass(slots=True)
class SimRecord:
    """One generation request as the server handled it.

    ``scheduled[i]`` is when token chunk ``i`` was due, ``written[i]`` when it was handed to
    the socket (taken right after the write), ``tokens[i]`` how many tokens it carried. A
    non-streamed request has one entry: the whole response. ``index`` is the arrival order
    (since start or the last reset); ``connection`` numbers the TCP connection it came on.
    """

    id: str
    index: int
    path: str
    stream: bool
    arrival: float
    prompt_tokens: int
    max_tokens: int
    connection: int
    tag: str | None = None
    fault: dict[str, Any] | None = None
    status: int = 200
    outcome: Outcome = "running"
    end: float | None = None
    scheduled: list[float] = field(default_factory=list)
    written: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    @property
    def lateness(self) -> list[float]:
        """Seconds each token chunk was written after its scheduled time."""
        return [w - s for w, s in zip(self.written, self.scheduled, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``GET /sim/records`` serves (lists shared, not copied)."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimRecord:
        """A record from ``GET /sim/records`` JSON (unknown keys ignored)."""
        return cls(**{k: v for k, v in data.items() if k in _FIELDS})


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SimRecord))
