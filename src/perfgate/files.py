"""Files written whole or not at all: a crash or a kill never leaves half a baseline, run
JSON or golden file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_json_atomic(path: Path, payload: str) -> None:
    """Write a file so readers see the old or the new content, never half of it."""
    write_bytes_atomic(path, payload.encode("utf-8"))


def write_bytes_atomic(path: Path, payload: bytes) -> None:
    """Write a file so readers see the old or the new content, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
