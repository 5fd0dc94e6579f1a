"""What a fleet run leaves: each profile's gate outcome on its node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["passed", "failed", "lost", "error", "unschedulable", "timed out"]


class GateOutcome(BaseModel):
    """What a profile's gate on a node sends back."""

    exit_code: int
    node_id: str
    hostname: str
    duration_s: float
    command: str
    log: str
    runs: dict[str, str] = Field(description="Run JSON file name -> its text.")


class FleetEntry(BaseModel):
    """One profile of a fleet run."""

    profile: str
    status: Status
    needs: dict[str, float] = Field(description="What its node had to offer (Ray resources).")
    why: str = ""
    node_id: str | None = None
    hostname: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    run_json: str | None = Field(None, description="Where the caller wrote its run JSON.")
    log: str | None = Field(None, description="Where the caller wrote its gate's log.")
    headline: str = ""


class FleetResult(BaseModel):
    """Every profile of a fleet run."""

    address: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    entries: list[FleetEntry] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every profile passed."""
        return bool(self.entries) and all(e.status == "passed" for e in self.entries)
