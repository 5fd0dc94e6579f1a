"""Report formats of a run JSON, one module each: a new format is one new file here.

Each module registers its :class:`Format` with :func:`register`. :func:`formats` imports
every module of this package, so ``perfgate report RUN --format NAME`` lists and finds a
new one, and a gated run writes it (``--perf-report NAME``), with no other change. A
format renders one text (``render``) or writes files of its own (``files``: the plots).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfgate.files import write_bytes_atomic
from perfgate.registry import Registry
from perfgate.results.run import RunRecord


@dataclass(frozen=True, slots=True)
class Context:
    """What a format may say about where the run came from."""

    run_json: str  # the run JSON's path, as the user gave it
    artifact_url: str | None = None  # where CI uploaded the run's files
    root: Path | None = None  # the project's root, where a baseline's recorded run lies


Files = Callable[[RunRecord, Path, Context], list[Path]]


@dataclass(frozen=True, slots=True)
class Format:
    """One report format: its name, one line of help, and how it renders a run: one text
    (``render``), or files of its own next to the run JSON (``files``, given the run
    JSON's path: it returns the files written, none where the run has nothing to show)."""

    name: str
    help: str
    render: Callable[[RunRecord, Context], str] | None = None
    suffix: str = ""  # the file's suffix where a gated run writes it (default: .NAME)
    files: Files | None = None
    nothing: str = "nothing to show"  # why ``files`` wrote none, in a sentence

    @property
    def file_suffix(self) -> str:
        """The suffix of the file a gated run writes (``--perf-report NAME``)."""
        return self.suffix or f".{self.name}"

    def text(self, run: RunRecord, context: Context) -> str:
        """The report as one text (a format of files has none: a ValueError)."""
        if self.render is None:
            raise ValueError(f"the {self.name} report is files, not a text: give --output DIR")
        return self.render(run, context)

    def write(self, run: RunRecord, run_path: Path, context: Context) -> list[Path]:
        """Write the report next to the run JSON at ``run_path``; the files written."""
        if self.files is not None:
            return self.files(run, run_path, context)
        path = run_path.with_suffix(self.file_suffix)
        write_bytes_atomic(path, self.text(run, context).encode())
        return [path]


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
