"""What a measured window reads over exactly a level run's measured requests: each source
is a :class:`Sampler`, opened as the measured requests start and closed, as they end,
into its part of the level's data (:class:`~perfgate.measure.data.LevelData`'s field of
the same name).

- :class:`SpecSampler`: the speculative-decoding counters' deltas (``spec``);
- :class:`perfgate.measure.server.ServerSampler`: the server's own metrics (``server``);
- :class:`perfgate.measure.telemetry.GpuSampler` and ``SmiSampler``: the GPUs (``gpu``).

A new source is one file: a function of :class:`WindowSource` returning a :class:`Sampler`
(or None where it has nothing to read), registered in :data:`SAMPLERS` under the name its
readings take in each level's data (``LevelData.samples[name]``, in the run JSON).
Modules of :mod:`perfgate.measure.plugins` are imported by the first window, so a file
added there registers itself; a user's plug-in registers from its own import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from perfgate.engines import Engine, SpecStats, parse_spec_counters
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.registry import Registry


class Sampler(Protocol):
    """One source of a level run's readings."""

    part: str  # the level's data field it fills (a plug-in's readings go under its name)

    def open(self) -> None:
        """The measured requests start."""
        ...

    def close(self) -> object | None:
        """The measured requests ended: this sampler's part of the level's data (None:
        nothing to report)."""
        ...

    def stop(self) -> None:
        """Interrupted, or done: its threads end, nothing is kept."""
        ...


class SpecSampler:
    """Speculative-decoding counter deltas over exactly the measured part of a level.
    ``text``: the server's metrics text just read by another sampler (one fetch, not
    two), where there is one; else the counters are fetched."""

    part = "spec"

    def __init__(
        self,
        engine: Engine,
        base_url: str,
        headers: dict[str, str],
        clients: HttpClients = NETWORK,
        text: Callable[[], str | None] | None = None,
    ) -> None:
        self.engine = engine
        self.base_url = base_url
        self.headers = headers  # the server's API key and extra headers
        self.clients = clients
        self.text = text
        self.before: SpecStats | None = None

    def _read(self) -> SpecStats | None:
        if self.engine.metrics_path is None or self.engine.spec_prefix is None:
            return None
        text = self.text() if self.text is not None else None
        if text is not None:  # read already (the server-metrics sampler's read)
            return parse_spec_counters(text, self.engine.spec_prefix)
        with self.clients.client(self.base_url, timeout=10.0, headers=self.headers) as c:
            return self.engine.spec_counters(c)

    def open(self) -> None:
        self.before = self._read()

    def close(self) -> SpecStats | None:
        """Counts since ``open`` (None where the server exposes no spec counters)."""
        after = self._read()
        if after is None or self.before is None:
            return None
        delta = after.minus(self.before)
        self.before = None
        return delta

    def stop(self) -> None:
        self.before = None


@dataclass(frozen=True)
class WindowSource:
    """What a plug-in sampler may read: the engine, the server's address and headers (its
    API key), and the run's HTTP clients (an injected transport in tests)."""

    engine: Engine
    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    clients: HttpClients = NETWORK


SamplerFactory = Callable[[WindowSource], "Sampler | None"]

# name -> factory; a factory's sampler closes into LevelData.samples[name] (JSON values)
SAMPLERS: Registry[SamplerFactory] = Registry("sampler", package="perfgate.measure.plugins")


def plugin_samplers(source: WindowSource) -> dict[str, Sampler]:
    """Each registered sampler that has something to read on this server, by name."""
    SAMPLERS.discover()
    built = {name: factory(source) for name, factory in SAMPLERS.items()}
    return {name: sampler for name, sampler in built.items() if sampler is not None}


def reading(part: object) -> object:
    """A plug-in sampler's part as JSON values (a pydantic model is dumped)."""
    dump = getattr(part, "model_dump", None)
    return dump(mode="json") if callable(dump) else part
