"""``perfgate fleet``: gate many profiles on a Ray cluster, one Ray task per profile.

Each profile's gate runs as a Ray task on a node that offers what the profile's
``[fleet]`` table asks for (GPUs, CPUs, custom resources naming the hardware): there the
task runs ``pytest -m perf --perf-profile ...`` in the project checkout (the same path on
every node), as a user would (launch, correctness, measure, judge), and returns its exit
code, its log and its run JSON. The caller writes them under the output directory, one
summary across profiles, and fails unless every profile passed. A node that dies mid-run
is reported as lost, never as a pass; a profile no node can take is unschedulable.

Ray is optional (``pip install 'perfgate[fleet]'``) and imported only here, only when a
fleet runs."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfgate.errors import PerfgateError
from perfgate.files import write_json_atomic
from perfgate.launch.lifeline import lifeline
from perfgate.profile import Profile
from perfgate.render.fleet import GATE_FAILURES, write_fleet
from perfgate.render.markdown import markdown_summary
from perfgate.results.fleet import FleetEntry, FleetResult, GateOutcome
from perfgate.results.run import RunRecord

INSTALL_HINT = "pip install 'perfgate[fleet]' (Ray)"


MAX_LOG_CHARS = 400_000  # the end of a gate's log comes back


def import_ray() -> Any:
    """Ray, or a PerfgateError with the install hint."""
    try:
        import ray  # optional: only a fleet needs it
    except ImportError as exc:
        raise PerfgateError(f"perfgate fleet needs Ray: {INSTALL_HINT}") from exc
    return ray


def needs_of(profile: Profile) -> dict[str, float]:
    """The Ray resources a profile's gate holds on its node."""
    spec = profile.fleet
    needs = {"CPU": spec.num_cpus, **spec.resources}
    if spec.num_gpus:
        needs["GPU"] = spec.num_gpus
    return needs


GATE_DIR_PREFIX = "perfgate-fleet-"


OWNER_FILE = "owner.pid"


def remove_orphaned_gate_dirs(parent: Path | None = None) -> list[Path]:
    """Remove the output directories of gates whose worker died before cleaning up (a
    lost node's, on a host that lives on): those whose owner pid no longer runs."""
    removed = []
    for directory in Path(parent or tempfile.gettempdir()).glob(f"{GATE_DIR_PREFIX}*"):
        try:
            owner = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or still being created
        if not _runs(owner):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def _runs(pid: int) -> bool:
    """Whether ``pid`` still runs: gone, or a zombie nobody reaped yet (a dead worker whose
    parent died too, under a container init that never reaps), is not running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a live process of another user
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: trust the signal
    return state not in ("Z", "X")


def gate_on_node(root: str, profile: str, pytest_args: Sequence[str]) -> dict[str, Any]:
    """Run one profile's gate here (the body of the Ray task): ``pytest -m perf`` in the
    project checkout at ``root``; returns a :class:`GateOutcome` as a dict."""
    import ray  # runs on a Ray worker

    started = time.monotonic()
    with contextlib.suppress(OSError):
        remove_orphaned_gate_dirs()
    with tempfile.TemporaryDirectory(prefix=GATE_DIR_PREFIX) as out:
        Path(out, OWNER_FILE).write_text(str(os.getpid()))
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "perf",
            f"--perf-profile={profile}",
            f"--perf-output={out}",
            "--perf-no-plots",
            *pytest_args,
        ]
        log_path = Path(out, "gate.log")  # a file, not a pipe: a dead worker breaks no pipe
        with log_path.open("w", encoding="utf-8") as log_file:
            done = subprocess.run(
                command,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                check=False,
                # its own process group: Ray SIGKILLs a dead worker's group, which would
                # leave the gate no time to stop its server; the parent-death SIGTERM does
                start_new_session=True,
                preexec_fn=lifeline(),  # SIGTERM when the Ray worker dies (a lost node)
            )
        runs = {p.name: p.read_text() for p in sorted(Path(out, "runs").glob("*.json"))}
        log = log_path.read_text(encoding="utf-8", errors="replace")
    return GateOutcome(
        exit_code=done.returncode,
        node_id=ray.get_runtime_context().get_node_id(),
        hostname=socket.gethostname(),
        duration_s=time.monotonic() - started,
        command=shlex.join(command),
        log=log[-MAX_LOG_CHARS:],
        runs=runs,
    ).model_dump()


def _unschedulable(needs: dict[str, float], cluster: dict[str, float]) -> str:
    """Why no node of the cluster can take these needs ('' when one may)."""
    short = {k: v for k, v in needs.items() if cluster.get(k, 0) < v}
    if not short:
        return ""
    wanted = ", ".join(f"{k} {v:g}" for k, v in short.items())
    custom = {k: v for k, v in short.items() if k not in ("CPU", "GPU")}
    hint = (
        f"; start a node with: ray start --address ADDRESS --resources '{json.dumps(custom)}'"
        if custom
        else ""
    )
    offered = ", ".join(f"{k} {v:g}" for k, v in sorted(cluster.items()) if "node:" not in k)
    return f"no node of the cluster offers {wanted} (it has: {offered}){hint}"


def _lost_reason(exc: BaseException) -> str | None:
    """Why a task's node or worker was lost, for Ray's errors that mean so (None: not a
    loss)."""
    name = type(exc).__name__
    if name in ("NodeDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError"):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
        return f"{name}: {first}"
    return None


def run_fleet(
    address: str,
    profiles: Sequence[tuple[str, Profile]],
    *,
    root: Path,
    output_dir: Path,
    pytest_args: Sequence[str] = (),
    timeout_s: float | None = None,
    progress: Callable[[str], None] = print,
) -> FleetResult:
    """Gate every profile (given as the reference users pass to ``--perf-profile``, and the
    profile it loads) on the Ray cluster at ``address``; writes each gate's log and run
    JSON under ``output_dir/<profile>/``, and ``fleet.json`` and ``fleet.md`` there."""
    ray = import_ray()
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    result = FleetResult(address=address)
    try:
        cluster = {k: float(v) for k, v in ray.cluster_resources().items()}
        gate = ray.remote(gate_on_node)
        pending: dict[Any, FleetEntry] = {}
        for reference, profile in profiles:
            needs = needs_of(profile)
            entry = FleetEntry(profile=profile.name, status="error", needs=needs)
            result.entries.append(entry)
            if why := _unschedulable(needs, cluster):
                entry.status, entry.why = "unschedulable", why
                progress(f"perfgate fleet: {profile.name}: UNSCHEDULABLE: {why}")
                continue
            custom = {k: v for k, v in needs.items() if k not in ("CPU", "GPU")}
            task = gate.options(
                num_cpus=needs["CPU"],
                num_gpus=needs.get("GPU", 0),
                resources=custom,
                max_retries=0,
                name=f"perfgate-gate-{profile.name}",
            )
            pending[task.remote(str(root), reference, list(pytest_args))] = entry
            wanted = ", ".join(f"{k} {v:g}" for k, v in needs.items())
            progress(f"perfgate fleet: {profile.name}: scheduled on a node with {wanted}")
        try:
            _collect(ray, pending, output_dir, timeout_s, progress)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the gates stop, their servers too
            for ref, entry in pending.items():
                ray.cancel(ref, force=True)
                entry.status, entry.why = "error", "interrupted: the fleet run was stopped"
            write_fleet(result, output_dir)
            raise
    finally:
        ray.shutdown()
    write_fleet(result, output_dir)
    return result


def _collect(
    ray: Any,
    pending: dict[Any, FleetEntry],
    output_dir: Path,
    timeout_s: float | None,
    progress: Callable[[str], None],
) -> None:
    """Wait for the gates, reporting each as it ends (and every minute, those running)."""
    started = time.monotonic()
    while pending:
        left = None if timeout_s is None else timeout_s - (time.monotonic() - started)
        if left is not None and left <= 0:
            for ref, entry in pending.items():
                ray.cancel(ref, force=True)
                entry.status = "timed out"
                entry.why = f"still running after {timeout_s:g} s (--timeout); cancelled"
                progress(f"perfgate fleet: {entry.profile}: TIMED OUT: {entry.why}")
            return
        done, _ = ray.wait(list(pending), num_returns=1, timeout=min(left or 60.0, 60.0))
        if not done:
            running = ", ".join(e.profile for e in pending.values())
            progress(f"perfgate fleet: running: {running} ({time.monotonic() - started:.0f} s)")
            continue
        for ref in done:
            entry = pending.pop(ref)
            try:
                outcome = GateOutcome.model_validate(ray.get(ref))
            except Exception as exc:  # a Ray error: the node or worker lost, or the task
                if (lost := _lost_reason(exc)) is not None:
                    entry.status, entry.why = "lost", f"the node running it was lost ({lost})"
                else:
                    entry.status, entry.why = "error", f"the gate's task failed: {exc}"
                progress(f"perfgate fleet: {entry.profile}: {entry.status.upper()}: {entry.why}")
                continue
            _record(entry, outcome, output_dir)
            progress(
                f"perfgate fleet: {entry.profile}: {entry.status.upper()} on {entry.hostname} "
                f"(node {entry.node_id and entry.node_id[:12]}) in {entry.duration_s:.0f} s"
                + (f": {entry.headline}" if entry.headline else "")
            )


def _record(entry: FleetEntry, outcome: GateOutcome, output_dir: Path) -> None:
    """Write a gate's log and run JSON, and fill its entry from them."""
    here = output_dir / entry.profile
    here.mkdir(parents=True, exist_ok=True)
    log = here / "gate.log"
    log.write_text(f"$ {outcome.command}\n{outcome.log}", encoding="utf-8")
    entry.log = str(log)
    entry.node_id, entry.hostname = outcome.node_id, outcome.hostname
    entry.exit_code, entry.duration_s = outcome.exit_code, outcome.duration_s
    for name, text in outcome.runs.items():
        path = here / name
        write_json_atomic(path, text)
        entry.run_json = str(path)
    if entry.run_json is not None:
        run = RunRecord.model_validate_json(Path(entry.run_json).read_text())
        entry.headline = markdown_summary(run).splitlines()[0].removeprefix("### ")
    if outcome.exit_code == 0:
        entry.status = "passed"
    elif outcome.exit_code in GATE_FAILURES:
        what = GATE_FAILURES[outcome.exit_code]
        entry.status, entry.why = "failed", f"the gate failed: {what} (see its run JSON and log)"
    else:
        entry.status = "error"
        entry.why = f"pytest exited {outcome.exit_code} (see {log})"
