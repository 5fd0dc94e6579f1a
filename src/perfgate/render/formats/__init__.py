"""Report formats of a run JSON, one module each: a new format is one new file here.

Each module registers its :class:`Format` with :func:`register`. :func:`formats` imports
every module of this package, so ``perfgate report RUN --format NAME`` lists and finds a
new one with no other change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfgate.registry import Registry
from perfgate.results.run import RunRecord


@dataclass(frozen=True, slots=True)
class Context:
    """What a format may say about where the run came from."""

    run_json: str  # the run JSON's path, as the user gave it
    artifact_url: str | None = None  # where CI uploaded the run's files


@dataclass(frozen=True, slots=True)
class Format:
    """One report format: its name, one line of help, and how it renders a run."""

    name: str
    help: str
    render: Callable[[RunRecord, Context], str]
    suffix: str = ""  # the file's suffix where a gated run writes it (default: .NAME)

    @property
    def file_suffix(self) -> str:
        """The suffix of the file a gated run writes (``--perf-report NAME``)."""
        return self.suffix or f".{self.name}"


FORMATS: Registry[Format] = Registry("report format", package=__name__)


def register(fmt: Format) -> Format:
    """Add a format (a name taken twice is an error)."""
    if FORMATS.get(fmt.name) == fmt:
        return fmt  # the same format again
    return FORMATS.register(fmt.name, fmt)


def find_format(name: str) -> Format:
    """The format of that name; a clear error naming the known ones."""
    known = formats()
    if name not in known:
        raise ValueError(f"no report format {name!r} (there are: {', '.join(known)})")
    return known[name]


def formats() -> dict[str, Format]:
    """Every format: those of this package's modules, and any registered besides."""
    FORMATS.discover()
    return dict(sorted(FORMATS.items()))
