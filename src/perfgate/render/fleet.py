"""A fleet run for people: its table, its Markdown summary, and the files written."""

from __future__ import annotations

from pathlib import Path

from perfgate.files import write_json_atomic
from perfgate.gate.policy import GateExit
from perfgate.render.markdown import markdown_summary
from perfgate.results.fleet import FleetResult
from perfgate.results.run import RunRecord

GATE_FAILURES: dict[int, str] = {  # pytest -m perf's exit codes of a failed gate (docs/verdicts.md)
    GateExit.REGRESSED: "regressed",
    GateExit.TOO_NOISY: "too noisy",
    GateExit.MISSING: "a figure missing, or no baseline",
    GateExit.CORRECTNESS: "correctness",
}


MARKS = {
    "passed": "✅",
    "failed": "❌",
    "lost": "💀",
    "error": "❌",
    "unschedulable": "⛔",
    "timed out": "⏱️",
}


def fleet_table(result: FleetResult) -> list[str]:
    """One line per profile, for the terminal."""
    lines = [f"{'profile':28} {'status':13} {'node':24} {'time':>7}  why / run JSON"]
    for e in result.entries:
        node = f"{e.hostname or '-'}:{(e.node_id or '-')[:8]}"
        took = f"{e.duration_s:.0f} s" if e.duration_s is not None else "-"
        lines.append(
            f"{e.profile:28} {e.status:13} {node:24} {took:>7}  {e.why or e.run_json or ''}"
        )
    return lines


def fleet_markdown(result: FleetResult) -> str:
    """The fleet's summary in Markdown, then each profile's own run summary."""
    bad = [e for e in result.entries if e.status != "passed"]
    mark = "✅" if result.passed else "❌"
    what = (
        f"all {len(result.entries)} profiles passed"
        if result.passed
        else f"{len(bad)} of {len(result.entries)} profiles did not pass"
    )
    out = [
        f"## {mark} perfgate fleet: {what}",
        "",
        f"Ray cluster `{result.address}`, {result.created_at}",
        "",
        "| profile | status | node | needs | time | verdict or why |",
        "|---|---|---|---|---:|---|",
    ]
    for e in result.entries:
        needs = ", ".join(f"{k} {v:g}" for k, v in e.needs.items())
        took = f"{e.duration_s:.0f} s" if e.duration_s is not None else "-"
        node = f"{e.hostname} `{e.node_id[:12]}`" if e.node_id else "-"
        why = (e.why or e.headline).replace("|", "\\|")
        out.append(
            f"| `{e.profile}` | {MARKS[e.status]} {e.status} | {node} | {needs} | {took} | {why} |"
        )
    out.append("")
    for e in result.entries:
        if e.run_json:
            run = RunRecord.model_validate_json(Path(e.run_json).read_text())
            out.append(markdown_summary(run, run_json=e.run_json))
    return "\n".join(out).rstrip() + "\n"


def write_fleet(result: FleetResult, output_dir: Path) -> None:
    """``fleet.json`` (every entry) and ``fleet.md`` (the summary) in ``output_dir``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output_dir / "fleet.json", result.model_dump_json(indent=1) + "\n")
    (output_dir / "fleet.md").write_text(fleet_markdown(result), encoding="utf-8")
