"""The simulator's configuration: the token schedule and the faults to inject.

Everything here is a frozen, validated value; invalid settings raise :class:`SimConfigError`
with a message that names the field and the allowed range.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, get_args

FaultKind = Literal["http_error", "cut", "malformed", "stall", "error_event"]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)


class SimConfigError(ValueError):
    """A simulator setting or fault is invalid; the message says which and why."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SimConfigError(message)


def _number(value: Any, name: str) -> float:
    _check(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        f"{name} must be a finite number (got {value!r})",
    )
    return float(value)


def _integer(value: Any, name: str) -> int:
    _check(isinstance(value, int) and not isinstance(value, bool), f"{name} must be an integer")
    return int(value)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault, applied to one request.

    - ``http_error``: answer at once with HTTP ``status`` (any 4xx/5xx) and an OpenAI-style
      error body; nothing is generated.
    - ``cut``: after ``after`` token chunks, close the connection (no ``[DONE]``, no end of
      the chunked body).
    - ``malformed``: after ``after`` token chunks, send ``data: {not json`` and end the stream.
    - ``stall``: after ``after`` token chunks, pause ``stall_s`` seconds, then go on; later
      chunks are scheduled ``stall_s`` later.
    - ``error_event``: after ``after`` token chunks, send ``data: {"error": {...}}`` and end
      the stream.

    ``after`` at or past the number of token chunks applies the fault after the last one,
    before the usage chunk and ``[DONE]``. Non-streaming requests: ``cut`` closes without a
    response, ``malformed`` answers 200 with a broken JSON body, ``error_event`` answers 200
    with ``{"error": ...}``, ``stall`` delays the response.
    """

    kind: FaultKind
    after: int = 0
    status: int = 500
    stall_s: float = 1.0
    message: str = "simulated fault"

    def __post_init__(self) -> None:
        _check(
            self.kind in FAULT_KINDS,
            f"fault kind must be one of {', '.join(FAULT_KINDS)} (got {self.kind!r})",
        )
        _check(_integer(self.after, "fault after") >= 0, "fault after must be >= 0 chunks")
        _check(
            400 <= _integer(self.status, "fault status") <= 599,
            f"fault status must be an HTTP error status 400-599 (got {self.status})",
        )
        _check(_number(self.stall_s, "fault stall_s") >= 0, "fault stall_s must be >= 0")
        _check(isinstance(self.message, str), "fault message must be a string")

    @classmethod
    def from_dict(cls, data: Any) -> Fault:
        """A fault from JSON: ``{"kind": "cut", "after": 3}``."""
        _check(isinstance(data, dict), f"a fault must be a JSON object (got {data!r})")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        _check(not unknown, f"unknown fault field(s) {unknown}; known: {sorted(names)}")
        _check("kind" in data, f"a fault needs a kind, one of {', '.join(FAULT_KINDS)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form :meth:`from_dict` reads."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Which requests get ``fault``, by arrival index (0-based, in arrival order of valid
    generation requests since start or the last reset).

    A request is chosen when its index is in ``at``, or when ``every`` > 0 and it is the
    ``every``-th, ``2*every``-th, ... request (index ``every - 1``, ``2*every - 1``, ...),
    or with ``probability``, drawn from a hash of ``seed`` and the index (the same requests
    on every run with the same seed).
    """

    fault: Fault
    at: tuple[int, ...] = ()
    every: int = 0
    probability: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check(isinstance(self.fault, Fault), "FaultRule.fault must be a Fault")
        object.__setattr__(self, "at", tuple(self.at))
        _check(
            all(_integer(i, "fault rule at") >= 0 for i in self.at),
            "fault rule at must list request indexes >= 0",
        )
        _check(_integer(self.every, "fault rule every") >= 0, "fault rule every must be >= 0")
        _check(
            0.0 <= _number(self.probability, "fault rule probability") <= 1.0,
            f"fault rule probability must be within [0, 1] (got {self.probability})",
        )
        _integer(self.seed, "fault rule seed")
        _check(
            bool(self.at) or self.every > 0 or self.probability > 0,
            "a fault rule selects no request: give at, every or probability",
        )

    def applies(self, index: int) -> bool:
        """Whether the request with this arrival index gets the fault."""
        if index in self.at or (self.every and (index + 1) % self.every == 0):
            return True
        if self.probability <= 0:
            return False
        digest = hashlib.blake2b(f"{self.seed}:{index}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64 < self.probability

    @classmethod
    def from_dict(cls, data: Any) -> FaultRule:
        """A rule from flat JSON: ``{"kind": "cut", "after": 3, "every": 5}``."""
        _check(isinstance(data, dict), f"a fault rule must be a JSON object (got {data!r})")
        selectors = {"at", "every", "probability", "seed"}
        fault = Fault.from_dict({k: v for k, v in data.items() if k not in selectors})
        chosen = {k: v for k, v in data.items() if k in selectors}
        if "at" in chosen:
            at = chosen["at"]
            _check(isinstance(at, list | tuple), "fault rule at must be a list of indexes")
            chosen["at"] = tuple(at)
        return cls(fault=fault, **chosen)

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON form :meth:`from_dict` reads."""
        return {
            **self.fault.to_dict(),
            "at": list(self.at),
            "every": self.every,
            "probability": self.probability,
            "seed": self.seed,
        }


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulator's schedule, model name and faults. Times are in seconds.

    Chunk ``i`` of a stream is scheduled at ``arrival + ttft_s`` (i = 0), then at the
    previous chunk's *scheduled* time plus ``tokens_in_chunk * itl_s * slowdown``, with
    ``slowdown = 1 + batch_slowdown * (in_flight - 1)`` and ``in_flight`` the number of
    generation requests in progress when the gap is computed. ``arrival`` is when the
    request body was fully read.

    ``api_key``: when set, every request but ``/health`` and ``/sim/*`` must carry
    ``Authorization: Bearer <api_key>`` (as vLLM's and llama-server's ``--api-key``); any
    other gets 401, and a line ``perfgate-sim: refused ...`` in the log.

    ``burst``: a stream without a fault writes all its chunks at once, at the first
    chunk's scheduled time (each chunk's scheduled and written time is that moment). The
    server then spends little CPU a token, so that the client's reading is what limits
    throughput: for tests of the load generator on few cores, not of timing.
    """

    model: str = "sim"
    ttft_s: float = 0.05
    itl_s: float = 0.01
    tokens_per_chunk: int = 1
    batch_slowdown: float = 0.0
    reasoning_tokens: int = 0
    reasoning_field: str = "reasoning_content"
    default_max_tokens: int = 16
    faults: tuple[FaultRule, ...] = field(default=())
    high_water_bytes: int = 256 * 1024
    burst: bool = False
    api_key: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(self.faults))
        _check(isinstance(self.model, str) and bool(self.model), "model must be a non-empty name")
        _check(_number(self.ttft_s, "ttft_s") >= 0, f"ttft_s must be >= 0 (got {self.ttft_s})")
        _check(_number(self.itl_s, "itl_s") >= 0, f"itl_s must be >= 0 (got {self.itl_s})")
        _check(
            _integer(self.tokens_per_chunk, "tokens_per_chunk") >= 1,
            f"tokens_per_chunk must be >= 1 (got {self.tokens_per_chunk})",
        )
        _check(
            _number(self.batch_slowdown, "batch_slowdown") >= 0,
            f"batch_slowdown must be >= 0 (got {self.batch_slowdown})",
        )
        _check(
            _integer(self.reasoning_tokens, "reasoning_tokens") >= 0,
            f"reasoning_tokens must be >= 0 (got {self.reasoning_tokens})",
        )
        _check(
            isinstance(self.reasoning_field, str)
            and self.reasoning_field.isidentifier()
            and self.reasoning_field not in ("content", "role"),
            f"reasoning_field must be a field name other than content/role "
            f"(got {self.reasoning_field!r})",
        )
        _check(
            _integer(self.default_max_tokens, "default_max_tokens") >= 1,
            "default_max_tokens must be >= 1",
        )
        _check(
            all(isinstance(rule, FaultRule) for rule in self.faults),
            "faults must be FaultRule values (use FaultRule.from_dict for JSON)",
        )
        _check(
            _integer(self.high_water_bytes, "high_water_bytes") >= 1,
            "high_water_bytes must be >= 1",
        )
        _check(isinstance(self.burst, bool), f"burst must be true or false (got {self.burst!r})")
        _check(isinstance(self.api_key, str), "api_key must be a string")

    def fault_for(self, index: int) -> Fault | None:
        """The fault of the first rule that chooses this arrival index, if any."""
        for rule in self.faults:
            if rule.applies(index):
                return rule.fault
        return None

    def with_changes(self, **changes: Any) -> SimConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    @classmethod
    def from_dict(cls, data: Any) -> SimConfig:
        """A config from JSON (faults as flat rule objects); unknown keys are refused."""
        _check(isinstance(data, dict), f"a sim config must be a JSON object (got {data!r})")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        _check(not unknown, f"unknown sim config field(s) {unknown}; known: {sorted(names)}")
        values = dict(data)
        rules = values.pop("faults", [])
        _check(isinstance(rules, list | tuple), "faults must be a list of fault rules")
        return cls(**values, faults=tuple(FaultRule.from_dict(r) for r in rules))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form :meth:`from_dict` reads."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "faults"}
        return {**values, "faults": [rule.to_dict() for rule in self.faults]}
