"""The run JSON: everything one perfgate run measured, enough to recompute every figure."""

from __future__ import annotations

import gzip
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from perfgate.diagnose.causes import DiagnosisRecord
from perfgate.errors import PerfgateError
from perfgate.facts import Fact
from perfgate.files import write_bytes_atomic, write_json_atomic
from perfgate.gate.verdict import Check
from perfgate.measure.data import Measurement

RUN_SCHEMA_VERSION = 2  # 2: token times as integer microsecond gaps


class BaselineRef(BaseModel):
    """Which baseline gated a run, and where its own recorded run lies."""

    hardware_key: str
    tier: str = Field(description="exact, any (hardware-independent targets) or none.")
    path: str = Field(description="The baseline file, relative to the project root.")
    run_json: str | None = Field(
        None, description="The run the baseline was recorded from (.run.json.gz), if kept."
    )
    scope: str = Field(
        "", description="What the comparison is: same host, another host of the key, floors."
    )
    host_spread: float | None = Field(
        None, description="Spread between hosts allowed for (sd of ln; 0 on the same host)."
    )
    detectable: float | None = Field(
        None,
        description="The smallest drop the gate fails 95% of the time, its runs as noisy as "
        "recorded (0.2: 20% fewer tok/s, or 1/0.8 times the seconds; median over the "
        "figures).",
    )


class RunRecord(BaseModel):
    """Everything one perfgate run measured, enough to recompute every metric."""

    schema_version: int = RUN_SCHEMA_VERSION
    perfgate_version: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    status: str = Field("running", description="running, passed, failed or interrupted.")
    profile: dict[str, Any]
    profile_digest: str
    engine: str
    engine_version: str = "unknown"
    launcher: str
    base_url: str = ""
    hardware: dict[str, Any] = Field(default_factory=dict)
    git_commit: str | None = None
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    checks: list[Check] = Field(default_factory=list)
    facts: dict[str, Fact] = Field(
        default_factory=dict, description="The server's configuration facts (see diagnose)."
    )
    notes: list[str] = Field(default_factory=list)
    code_sandbox: str | None = Field(
        None, description="How the model's generated code was contained, when it ran."
    )
    baseline: BaselineRef | None = Field(None, description="The baseline that gated this run.")
    warnings: list[str] = Field(
        default_factory=list, description="What perfgate could not do as usual."
    )
    correctness_failures: list[str] = Field(
        default_factory=list, description="Correctness tests that failed (pytest node ids)."
    )
    diagnosis: DiagnosisRecord | None = Field(
        None, description="Why figures failed (set when some did, or the sweep aborted)."
    )
    reference: RunRecord | None = Field(
        None,
        description="A side-by-side run's reference (A): its own record, measured "
        "interleaved with this one (B); the checks are B's, judged against A pair by pair.",
    )

    def write(self, path: Path) -> None:
        """Write atomically as JSON: indented, with arrays of numbers on one line."""
        write_json_atomic(path, self.text())

    def text(self) -> str:
        """The run JSON's text."""
        return one_line_number_arrays(self.model_dump_json(indent=1)) + "\n"

    def write_compressed(self, path: Path) -> None:
        """Write atomically as gzip-compressed JSON (``.json.gz``), byte-identical for the
        same run (no timestamp in the gzip header)."""
        write_bytes_atomic(path, gzip.compress(self.text().encode(), mtime=0))


# an indented, non-empty array of plain numbers: "[\n  1,\n  2\n ]" (a JSON string never
# holds a raw newline, so text inside strings, such as "levels not run: [2, 4]", is safe)
_NUMBER_ARRAY = re.compile(
    r"\[\n(?:[ \t]*-?[0-9][0-9.eE+-]*,\n)*[ \t]*-?[0-9][0-9.eE+-]*\n[ \t]*\]"
)


def one_line_number_arrays(text: str) -> str:
    """Indented JSON with each array of plain numbers put back on one line."""
    return _NUMBER_ARRAY.sub(lambda m: re.sub(r"\s+", "", m.group(0)), text)


def git_commit(root: Path) -> str | None:
    """The project's current commit, where it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def load_run(path: Path) -> RunRecord:
    """Read a run JSON, plain or ``.json.gz`` (a clear error when the file is not one this
    version can read)."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return RunRecord.model_validate_json(raw)
    except ValidationError as exc:
        first = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3]
        )
        raise PerfgateError(
            f"{path} is not a perfgate run JSON of schema {RUN_SCHEMA_VERSION} "
            f"({exc.error_count()} problems, first: {first})"
        ) from exc
