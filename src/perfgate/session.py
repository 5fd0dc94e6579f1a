"""One perfgate run: start or attach the backend, measure, judge, record, stop.

The pytest plugin and fixtures are thin wrappers around this object; it imports no
pytest so the same run can be driven from a script or the CLI.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx

from perfgate import __version__
from perfgate.baseline import (
    Baseline,
    Check,
    build_baseline,
    compare_level,
    diff_lines,
    gated_figures,
    load_baseline,
    save_baseline,
)
from perfgate.client import RequestRecord
from perfgate.engines import Engine, get_engine
from perfgate.errors import BackendError, WorkloadError
from perfgate.launch import AttachedBackend, Backend, describe_local_hardware, launch_process
from perfgate.load import LevelRun, RequestPlan, run_sweep
from perfgate.profile import Profile
from perfgate.report import LevelData, Measurement, RunRecord, render_table
from perfgate.workload import Prompt, Tokenizer, build_prompts

Progress = Callable[[str], None]


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


class PerfgateSession:
    """State of one run. Create with a validated profile; call ``start_backend`` lazily."""

    def __init__(
        self,
        profile: Profile,
        *,
        root: Path,
        baselines_dir: Path,
        output_dir: Path,
        base_url: str | None = None,
        update_baselines: bool = False,
        progress: Progress = print,
    ) -> None:
        self.profile = profile
        self.engine: Engine = get_engine(profile.engine)
        self.root = root
        self.base_url = base_url
        self.update_baselines = update_baselines
        self.progress = progress
        self.output_dir = output_dir
        self.baseline_path = baselines_dir / f"{profile.name}.json"
        self.baseline: Baseline | None = load_baseline(self.baseline_path)
        self.owner = f"perfgate-{uuid.uuid4().hex[:12]}"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.run_path = output_dir / "runs" / f"{profile.name}-{stamp}-{self.owner[-6:]}.json"
        self.backend: Backend | None = None
        self.backend_error: BackendError | None = None
        self.correctness_failures: list[str] = []
        self.run = RunRecord(
            perfgate_version=__version__,
            profile=profile.model_dump(mode="json"),
            profile_digest=profile.digest(),
            engine=profile.engine,
            launcher="attach" if base_url else profile.launcher,
            git_commit=git_commit(root),
        )

    # -- backend -----------------------------------------------------------------------
    def start_backend(self) -> Backend:
        """Launch (or attach to) the profile's server and wait until it generates a token."""
        if self.backend is not None:
            return self.backend
        if self.backend_error is not None:
            raise self.backend_error
        try:
            backend = self._launch()
            self.backend = backend
            self.progress(f"perfgate: waiting for {self.engine.name} at {backend.base_url} ...")
            backend.wait_ready(self.profile.timeouts.startup_s)
        except BackendError as exc:
            self.backend_error = exc
            self.run.notes.append(f"backend failed: {exc}")
            self.stop_backend()
            raise
        with httpx.Client(base_url=backend.base_url, timeout=10.0) as client:
            self.run.engine_version = self.engine.version(client)
        self.run.base_url = backend.base_url
        self.progress(
            f"perfgate: {self.engine.name} {self.run.engine_version} ready at {backend.base_url}"
        )
        return backend

    def _launch(self) -> Backend:
        model = self.profile.model.name
        if self.base_url:
            self.run.hardware = {"label": self.profile.hardware, "host": "attached"}
            return AttachedBackend(self.base_url, engine=self.engine, model=model)
        if self.profile.launcher == "attach":
            raise BackendError(
                f"profile {self.profile.name} attaches to a running server: pass --base-url URL"
            )
        self.run.hardware = {"label": self.profile.hardware, **describe_local_hardware()}
        self.progress(f"perfgate: starting {self.engine.name} for profile {self.profile.name}")
        return launch_process(self.profile, self.engine, self.output_dir / "logs", owner=self.owner)

    def stop_backend(self) -> None:
        """Stop the backend if perfgate started it."""
        if self.backend is not None:
            self.backend.stop()

    def evidence(self) -> str:
        """Server state and log tail, for failure messages."""
        if self.backend is None:
            return ""
        state = "alive" if self.backend.alive() else f"exited ({self.backend.exit_code()})"
        log = self.backend.log_tail(15)
        return f"server {state}" + (f"; last log lines:\n{log}" if log else "")

    # -- measuring ---------------------------------------------------------------------
    def plan(self) -> RequestPlan:
        """What each measured request sends."""
        w = self.profile.workload
        return RequestPlan(
            api=w.api,
            model=self.profile.model.name,
            output_len=w.output_len,
            request_timeout_s=self.profile.timeouts.request_s,
            extras={"temperature": 0, **self.engine.completion_extras()},
            reasoning_fields=self.engine.reasoning_fields,
        )

    def _prompts(self, name: str, concurrency: int, count: int) -> list[Prompt]:
        w = self.profile.workload
        backend = self.start_backend()
        with httpx.Client(base_url=backend.base_url, timeout=30.0) as client:
            tokenizer = Tokenizer(client, self.engine, self.profile.model.name)
            seed = random.Random(f"{w.seed}:{name}:{concurrency}").getrandbits(32)
            return build_prompts(tokenizer, count, w.input_len, seed)

    def measure(
        self, name: str, levels: Sequence[int], requests_at: Callable[[int], int]
    ) -> Measurement:
        """Run levels in order; record each as it completes (the run JSON survives aborts)."""
        backend = self.start_backend()
        warmup = self.profile.workload.warmup
        measurement = Measurement()
        self.run.measurements[name] = measurement
        done = {"n": 0}

        def prompts_for(c: int) -> list[Prompt]:
            total = requests_at(c)
            self.progress(
                f"perfgate: {name} C={c}: {total} requests "
                f"({self.profile.workload.input_len} in / "
                f"{self.profile.workload.output_len} out tokens, {warmup} warmup)"
            )
            done["n"] = 0
            return self._prompts(name, c, total + warmup)

        def on_record(_: int, record: RequestRecord) -> None:
            done["n"] += 1
            if not record.ok:
                self.progress(f"perfgate:   request failed: {record.error}")

        def on_level(level: LevelRun) -> None:
            data = LevelData.from_run(level)
            measurement.levels.append(data)
            m = data.metrics
            self.progress(
                f"perfgate: {name} C={m.concurrency}: {m.agg_tok_s:.1f} tok/s agg, "
                f"{m.per_request_tok_s.mean or 0:.1f} tok/s per request, "
                f"ok {m.ok}, fail {m.fail}, wall {m.wall_s:.1f}s"
            )
            self.save_run()

        def should_continue(level: LevelRun) -> bool:
            if not backend.alive():
                self.progress("perfgate: server is no longer running; stopping the sweep")
                return False
            return True

        try:
            sweep = asyncio.run(
                run_sweep(
                    backend.base_url,
                    self.plan(),
                    levels,
                    prompts_for,
                    warmup=warmup,
                    level_timeout_s=self.profile.timeouts.level_s,
                    should_continue=should_continue,
                    on_record=on_record,
                    on_level=on_level,
                )
            )
        except WorkloadError as exc:
            ran = {lv.concurrency for lv in measurement.levels}
            measurement.not_run = [c for c in levels if c not in ran]
            self.save_run()
            raise BackendError(
                f"{name}: could not prepare the next level ({exc}); levels not run: "
                f"{measurement.not_run}. {self.evidence()}"
            ) from exc
        measurement.not_run = sweep.not_run
        self.save_run()
        return measurement

    def judge(self, name: str) -> list[Check]:
        """Compare a measurement's figures with the baseline and remember the checks."""
        checks = [
            check
            for level in self.run.measurements[name].levels
            for check in compare_level(name, level.metrics, self.baseline)
        ]
        self.run.checks.extend(checks)
        self.save_run()
        return checks

    def table(self, name: str) -> str:
        """The concurrency table of one measurement."""
        m = self.run.measurements[name]
        return render_table(name, [lv.metrics for lv in m.levels], self.baseline, m.not_run)

    # -- recording ---------------------------------------------------------------------
    def save_run(self) -> None:
        """Write the run JSON as it stands."""
        self.run.write(self.run_path)

    def failed_requests(self) -> int:
        """Failed requests over all measurements."""
        return sum(lv.metrics.fail for m in self.run.measurements.values() for lv in m.levels)

    def record_baseline(self) -> list[str]:
        """Write a new baseline from this run; returns the lines to print."""
        if self.correctness_failures:
            return [
                f"perfgate: baseline NOT updated: correctness failed "
                f"({'; '.join(self.correctness_failures)})"
            ]
        if (failed := self.failed_requests()) or not self.run.measurements:
            why = f"{failed} requests failed" if failed else "nothing was measured"
            return [f"perfgate: baseline NOT updated: {why}"]
        if any(m.not_run for m in self.run.measurements.values()):
            return ["perfgate: baseline NOT updated: the sweep did not run every level"]
        measured: dict[str, float] = {}
        for name, m in self.run.measurements.items():
            for level in m.levels:
                measured.update(gated_figures(name, level.metrics))
        new = build_baseline(
            self.profile.name,
            self.profile.hardware,
            measured,
            self.baseline,
            provenance={
                "perfgate_version": __version__,
                "git_commit": self.run.git_commit,
                "profile_digest": self.run.profile_digest,
                "engine": self.run.engine,
                "engine_version": self.run.engine_version,
                "model": self.profile.model.name,
                "hardware": self.run.hardware,
                "run_json": str(self.run_path),
            },
        )
        save_baseline(self.baseline_path, new)
        lines = [
            f"perfgate: baseline written to {self.baseline_path}:",
            *diff_lines(self.baseline, new),
        ]
        self.baseline = new
        return lines

    def _relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def finish(self, status: str) -> None:
        """Final status into the run JSON."""
        self.run.status = status
        self.save_run()
