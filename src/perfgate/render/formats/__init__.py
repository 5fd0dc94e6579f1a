"""Report formats of a run JSON, one module each: a new format is one new file here.

Each module registers its :class:`Format` with :func:`register`. :func:`formats` imports
every module of this package, so ``perfgate report RUN --format NAME`` lists and finds a
new one with no other change.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

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


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a format (a name taken twice is an error)."""
    if fmt.name in FORMATS and FORMATS[fmt.name] != fmt:
        raise ValueError(f"report format {fmt.name!r} is already registered")
    FORMATS[fmt.name] = fmt
    return fmt


def formats() -> dict[str, Format]:
    """Every format: those of this package's modules, and any registered besides."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(FORMATS.items()))
