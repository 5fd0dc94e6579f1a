"""A side-by-side (A/B) run: A, the reference, and B, the candidate, on one host at once.

Each side is a :class:`~perfgate.run.session.PerfgateSession` (its own server control,
prompt source and measurer); one loop pulls an :class:`~perfgate.run.plans.ABPlan` and runs
each step on its side's lane, so the two servers are loaded one at a time, A B B A. The
paired policy (:mod:`perfgate.gate.ab`) decides blocks and the verdict; B's run JSON holds
both sides (A's record as its ``reference``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

import perfgate.suites
from perfgate.client import SimpleClient
from perfgate.correctness.golden import GoldenOutputs, Greedy, compare_golden, greedy_outputs
from perfgate.diagnose.causes import diagnose
from perfgate.errors import BackendError, ProfileError
from perfgate.gate.ab import ABPolicy
from perfgate.gate.policy import exit_code
from perfgate.gate.values import level_name
from perfgate.gate.verdict import Check
from perfgate.launch import Backend
from perfgate.launch.hardware import free_memory_here, nearly_full
from perfgate.measure.data import LevelData, Measurement
from perfgate.profile import Profile
from perfgate.render.ab import ab_table
from perfgate.run.measuring import Lane
from perfgate.run.plans import ABLifetimesPlan, ABPlan, Decision
from perfgate.run.session import Gated, Outcome, PerfgateSession
from perfgate.run.settings import chosen_figures

USAGE = 4  # pytest's usage-error exit code: the reference could not run, B was not judged
GOLDEN_PROMPTS = Path(perfgate.suites.__file__).parent / "correctness/data/golden_prompts.json"
COMPARED = ("model.name", "workload")  # what both sides must share


def against_a(cause: str) -> str:
    """A likely cause's words, which name the baseline's value, naming A's instead."""
    return cause.replace("(baseline ", "(A: ")


class ReferenceUnavailable(BackendError):
    """A, the reference, could not start: nothing about B can be judged."""


def differences(a: Profile, b: Profile) -> list[str]:
    """The shared fields (:data:`COMPARED`) in which two profiles differ, each named with
    both values."""
    out = []
    if a.model.name != b.model.name:
        out.append(f"model.name: A {a.model.name!r}, B {b.model.name!r}")
    wa, wb = a.workload.model_dump(), b.workload.model_dump()
    for key in sorted(wa.keys() | wb.keys()):
        if wa.get(key) != wb.get(key):
            out.append(f"workload.{key}: A {wa.get(key)!r}, B {wb.get(key)!r}")
    return out


@dataclass(frozen=True)
class ABOptions:
    """What an A/B run was asked on the command line: the tolerance B must stay within and
    the pairs a level (None: B's profile's ``[ab]``), and whether the two profiles may
    differ in model or workload."""

    tolerance: float | None = None
    allow_model_change: bool = False
    min_pairs: int | None = None
    max_pairs: int | None = None
    colocate: bool | None = None  # False: alternate server lifetimes (None: [ab] colocate)


class ABRun:
    """One side-by-side run of two sessions. Colocated (the default), both servers are up
    together and each level runs a warm-up a side, then ABBA blocks until the paired
    verdict decides; else whole server lifetimes alternate (:class:`ABLifetimesPlan`)."""

    def __init__(
        self,
        a: PerfgateSession,
        b: PerfgateSession,
        options: ABOptions = ABOptions(),
        progress: Callable[[str], None] = print,
    ) -> None:
        self.a, self.b, self.options, self.progress = a, b, options, progress
        if (changed := differences(a.profile, b.profile)) and not options.allow_model_change:
            raise ProfileError(
                "A and B must serve the same model with the same workload, to compare them; "
                f"they differ in: {'; '.join(changed)} (--allow-model-change, from pytest "
                "--perf-ab-allow-model-change, to compare them anyway)"
            )
        planned = b.settings.planned()  # the family: every planned level of every measurement
        spec = b.profile.ab
        self.tolerance = spec.tolerance if options.tolerance is None else options.tolerance
        try:
            self.policy = ABPolicy.build(
                self.tolerance,
                sum(len(levels) for levels in planned.values()) or 1,
                chosen_figures(b.profile),
                min_pairs=spec.min_pairs if options.min_pairs is None else options.min_pairs,
                max_pairs=spec.max_pairs if options.max_pairs is None else options.max_pairs,
            )
        except ValueError as exc:  # the rule's own check: tolerance, min and max pairs
            raise ProfileError(f"A/B: {exc}") from exc
        self.colocate = spec.colocate if options.colocate is None else options.colocate
        if not self.colocate and (attached := [s for s in (a, b) if s.settings.base_url]):
            raise ProfileError(
                "A/B with server lifetimes alternating ([ab] colocate = false) starts and "
                f"stops both servers; {attached[0].profile.name} is attached to a running "
                "one (a base URL): start both with perfgate, or colocate them"
            )
        # the same prompts on both sides: one nonce (attached servers may cache prompts)
        a.prompt_source.nonce = b.prompt_source.nonce
        a.measurer.save = b.save_run  # one run JSON: B's, A's record inside it
        b.run.reference = a.run
        self.checks: list[Check] = []
        self.answers_changed = ""  # B's greedy answers against A's, when too many differ
        self.answers_compared = False  # once a run, before its first measurement
        self.reference_failed = ""  # why A could not start: the run ends with USAGE
        self.restarts, self.restart_s = 0, 0.0  # alternating lifetimes: starts, their time

    def start_reference(self) -> Backend:
        """Start (or attach) A. A that cannot start is a usage problem
        (:class:`ReferenceUnavailable`): nothing about B can be judged."""
        try:
            return self.a.start_backend()
        except BackendError as exc:
            self.reference_failed = f"A (the reference) could not start: {exc}"
            raise ReferenceUnavailable(self.reference_failed) from exc

    def start(self) -> tuple[Backend, Backend]:
        """Start (or attach) A, then B, both up together, and check that they fit: B that
        cannot start is B's failure."""
        backend_a = self.start_reference()
        try:
            backend_b = self.b.start_backend()
        except BackendError as exc:
            raise BackendError(
                f"{exc} (B was started beside A, which is up: if the two do not both fit, "
                "set [ab] colocate = false to alternate their lifetimes)"
            ) from exc
        self.check_fit()
        return backend_a, backend_b

    def check_fit(self) -> None:
        """With both servers up on this host: its memory and each GPU's still have 5%
        free, or the run stops here (exit 4), saying how to alternate instead."""
        local = ("process", "docker")
        if any(s.settings.base_url or s.profile.launcher not in local for s in (self.a, self.b)):
            return  # a server elsewhere: this host's memory says nothing about it
        memories = free_memory_here()
        self.progress("perfgate: A and B both up; " + "; ".join(m.describe() for m in memories))
        if full := nearly_full(memories):
            self.reference_failed = (
                "A and B do not both fit on this host ("
                + "; ".join(m.describe() for m in full)
                + " with both up): set [ab] colocate = false in B's profile (or --alternate) "
                "to alternate their lifetimes"
            )
            raise ReferenceUnavailable(self.reference_failed)

    def bring_up(self, side: str) -> Backend:
        """One side's server, started (or attached); when the lifetimes alternate, the
        other side's is stopped first."""
        session, other = (self.a, self.b) if side == "A" else (self.b, self.a)
        if not self.colocate:
            other.stop_backend(for_now=True)
        return self.start_reference() if session is self.a else session.start_backend()

    def refusal(self) -> tuple[str, str] | None:
        """Why the levels are not measured, as :meth:`PerfgateSession.refusal`: A (the
        reference) failed a usability check, or B did."""
        if self.a.unusable:
            return "fail", (
                "not measured: A (the reference) is unusable (errors, empty or degenerate "
                "output): " + ", ".join(self.a.unusable)
            )
        return self.b.refusal(needs_baseline=False)

    def greedy(self, session: PerfgateSession, prompts: list[str], max_tokens: int) -> Greedy:
        """One side's greedy answers to ``prompts`` (with their token log-probs)."""
        backend = session.start_backend()
        client = SimpleClient(
            backend.base_url,
            session.profile.model.name,
            timeout_s=session.profile.timeouts.request_s,
            fields=session.profile.server.request_fields,
            transport=session.settings.http.transport,
            headers=backend.headers,
        )
        return greedy_outputs(client, prompts, max_tokens, session.engine.deterministic_extras())

    def compare_answers(self) -> str:
        """B's greedy answers to the golden prompts against A's, as the twin check does
        (a near-tie flip is no change); the failure text when fewer than B's profile's
        ``correctness.twin_min_exact`` match, else ''."""
        self.answers_compared = True
        data = json.loads(GOLDEN_PROMPTS.read_text(encoding="utf-8"))
        prompts, max_tokens = list(data["prompts"]), int(data["max_tokens"])
        try:
            self.bring_up("A")
            theirs = self.greedy(self.a, prompts, max_tokens)
            self.bring_up("B")
            ours = self.greedy(self.b, prompts, max_tokens)
        except httpx.HTTPError as exc:
            return f"greedy answers could not be compared: {exc}"
        spec = self.b.profile.correctness
        reference = GoldenOutputs(
            schema_version=1, max_tokens=max_tokens, outputs=theirs.outputs, tokens=theirs.tokens
        )
        diffs = compare_golden(reference, ours.outputs, ours.tokens, spec.golden_tie_margin)
        matched = sum(d.outcome != "changed" for d in diffs) / len(diffs)
        self.progress(f"perfgate: B's greedy answers against A's: {matched:.0%} the same")
        if matched >= spec.twin_min_exact:
            return ""
        changed = "\n".join(d.message() for d in diffs if d.outcome == "changed")
        return (
            f"B's greedy answers differ from A's: {matched:.0%} the same "
            f"(minimum {spec.twin_min_exact:.0%}):\n{changed}"
        )

    def measure(
        self,
        name: str = "sweep",
        requests_at: Callable[[int | float], int] | None = None,
        levels: Sequence[int | float] | None = None,
        *,
        sequential: bool = False,
    ) -> tuple[Measurement, Measurement]:
        """B's answers against A's, then the planned levels on both sides, ABBA, each
        block judged as it ends (whole server lifetimes alternating, unless colocated)."""
        if self.colocate:
            self.start()
        if not self.answers_compared and (why := self.compare_answers()):
            self.answers_changed = why
            self.b.correctness_failed("ab: greedy answers against A", usability=False, ran=True)
            self.progress(f"perfgate: {why}")
        w, ab_rounds = self.b.profile.workload, self.b.profile.ab.rounds
        levels = list(w.levels if levels is None else levels)

        def at(level: int | float) -> int:
            """A run's requests: B's [ab] rounds a request in flight where set (shorter
            runs, more pairs), else the test's (or the workload's) own count."""
            if ab_rounds is not None and not sequential and not isinstance(level, float):
                return int(level) * ab_rounds
            if requests_at is not None:
                return requests_at(level)
            return w.rate_requests if isinstance(level, float) else int(level) * w.rounds

        ma, mb = Measurement(), Measurement()
        self.a.run.measurements[name] = ma
        self.b.run.measurements[name] = mb
        min_pairs = self.policy.rule.min_pairs

        def decide(
            level: int | float, runs_a: list[LevelData], runs_b: list[LevelData]
        ) -> Decision:
            for side, session in (("A", self.a), ("B", self.b)):
                backend = session.backend  # None: its lifetime is over (not colocated)
                if backend is not None and not backend.alive():
                    mb.aborted = f"{side}'s server is no longer running"
                    self.progress(f"perfgate: {mb.aborted}; stopping")
                    return "stop"
            step, why = self.policy.after_block(name, runs_a, runs_b)
            if step == "stop":
                mb.aborted = f"early stop at {level_name(level)}: {why}"
                self.progress(f"perfgate: {mb.aborted}")
            elif step == "repeat" and len(runs_a) >= min_pairs:
                self.progress(f"perfgate: {name} {level_name(level)}: {why}; another block")
            return step

        self.progress(
            f"perfgate: A/B {name}: {self.a.profile.name} (A) against {self.b.profile.name} (B), "
            f"levels {levels}, A B B A, {min_pairs}..{self.policy.rule.max_pairs} pairs a level"
        )
        plan: ABPlan | ABLifetimesPlan
        kind = ABPlan if self.colocate else ABLifetimesPlan
        plan = kind(levels, at, decide, sequential=sequential, warmup=self.b.profile.ab.warmup)
        sides = {"A": self.a, "B": self.b}
        with asyncio.Runner() as aio, contextlib.ExitStack() as lanes:
            lane: dict[str, Lane] = {}
            done: list[LevelData] = []
            while (step := plan.next(done)) is not None:
                if step.side not in lane:  # colocated: once a side; else each lifetime
                    if not self.colocate:
                        lanes.close()  # the other side's lane: its server stops next
                        lane.clear()
                        self.lifetime_begins(step.side, plan)
                    lane[step.side] = lanes.enter_context(
                        sides[step.side].measurer.lane(name, aio, label=f"{step.side} {name}")
                    )
                done.append(lane[step.side].run(step))
                if not step.discard:
                    (ma if step.side == "A" else mb).levels.append(done[-1])
        ma.not_run = mb.not_run = plan.not_run
        self.b.save_run()
        return ma, mb

    def measure_single(self, name: str, rounds: int) -> tuple[Measurement, Measurement]:
        """Sequential single requests at C=1 on both sides, ``rounds`` a run (B's
        ``[ab] single_requests`` where set), A B B A."""
        rounds = self.b.profile.ab.single_requests or rounds
        return self.measure(name, lambda _: rounds, [1], sequential=True)

    def lifetime_begins(self, side: str, plan: ABLifetimesPlan | ABPlan) -> None:
        """Server lifetimes alternate: stop the other side's server, start this one's,
        and say what that costs (one start a pair of runs a level)."""
        up = (self.a if side == "A" else self.b).backend is not None
        started = time.monotonic()
        self.bring_up(side)
        took = time.monotonic() - started
        if not isinstance(plan, ABLifetimesPlan):
            return
        if not up:  # else still up from the last measurement's last lifetime: no start
            self.restarts += 1
            self.restart_s += took
        if plan.lifetimes == 1:
            self.progress(
                f"perfgate: A and B are not colocated ([ab] colocate = false): whole server "
                f"lifetimes alternate, A, B, A, ..., each adding one pair of runs a level; at "
                f"least {self.policy.rule.min_pairs + 1} starts a measurement, up to "
                f"{self.policy.rule.max_pairs + 1}"
            )
        how = "still up" if up else f"started in {took:.1f} s"
        self.progress(
            f"perfgate: lifetime {plan.lifetimes} ({side}): {how}; "
            f"{self.restarts} starts so far, {self.restart_s:.0f} s in all"
        )

    def facts_changed(self, failed: Sequence[Check]) -> list[str]:
        """Why B failed, from both sides' live facts: what differs (A → B), and the
        likely causes ranked (B's facts against A's, as against a baseline's)."""
        for session in (self.a, self.b):
            if session.backend is not None:
                session.collect_facts()
        why = diagnose(self.b.run.facts, self.a.run.facts, failed)
        record = why.record()
        record.causes = [against_a(cause) for cause in record.causes]
        self.b.run.diagnosis = record
        lines = []
        if why.changes:
            lines.append("perfgate: configuration facts that differ (A → B):")
            lines += [f"  {change.describe()}" for change in why.changes]
        if failed and why.causes:
            lines.append("perfgate: likely causes, most likely first:")
            lines += [f"  {i}. {cause}" for i, cause in enumerate(record.causes, 1)]
        return lines

    def gate(self, name: str) -> Gated:
        """One measurement judged, with the failure text when it fails (as
        :meth:`PerfgateSession.gate`: the failing checks, the table)."""
        checks = [c for c in self.judge_all() if c.key.startswith(f"{name}.")]
        problems = [c.message() for c in checks if c.failed]
        if aborted := self.b.run.measurements[name].aborted:
            problems.append(aborted)
        if not problems:
            return Gated(checks)
        text = "\n".join(
            [f"perfgate: {name} failed: B against A", *problems, "", ab_table(name, checks)]
        )
        return Gated(checks, problems, text)

    def judge_all(self) -> list[Check]:
        """Every measurement both sides ran, judged (into B's run JSON)."""
        a, b = self.a.run.measurements, self.b.run.measurements
        self.checks = [
            c for name in b if name in a for c in self.policy.judge(name, a[name], b[name])
        ]
        self.b.run.checks = self.checks
        return self.checks

    def conclude(
        self,
        status: int = 0,
        *,
        summary_paths: Sequence[Path] = (),
        reports: Sequence[str] = (),
        artifact_url: str | None = None,
        plots: bool = True,
    ) -> Outcome:
        """Stop both servers, judge, write the run JSON, and the exit code with the
        tables to print. ``status``: the test runner's exit code so far (0 passed,
        1 tests failed, 2 interrupted, others its own). A that could not start ends it
        with :data:`USAGE`: nothing about B was judged. ``summary_paths``, ``reports``,
        ``artifact_url``, ``plots``: the Markdown summary, report formats and plots (B/A
        per level among them), as a gated run's."""
        if not self.reference_failed and self.a.answered_wrongly:
            self.reference_failed = "A (the reference) failed its correctness checks: " + ", ".join(
                self.a.correctness_failures
            )
        if self.reference_failed:
            for session in (self.b, self.a):
                session.stop_backend()
            return Outcome(USAGE, [f"perfgate: {self.reference_failed}; B was not judged"])
        self.judge_all()
        lines: list[str] = []
        for name in self.b.run.measurements:
            lines += ["", ab_table(name, self.checks)]
        failed = [c for c in self.checks if c.failed]
        aborted = [m.aborted for m in self.b.run.measurements.values() if m.aborted]
        lines += [c.message() for c in failed] + [f"perfgate: {why}" for why in aborted]
        if self.answers_changed:
            lines.append(f"perfgate: {self.answers_changed}")
        if failed or self.answers_changed:
            lines += self.facts_changed(failed)
        word = "failed" if failed or aborted or self.answers_changed or status else "passed"
        if status == 2:
            word = "interrupted"
        for session in (self.a, self.b):
            session.run.status = word
        self.b.run.baseline = None  # judged against A: no baseline file gated it
        for session in (self.b, self.a):
            session.stop_backend()
        self.b.save_run()
        code = exit_code(
            1 if aborted and status == 0 else status,
            self.checks,
            correctness_failed=bool(self.answers_changed) or self.b.answered_wrongly,
            no_baseline=False,
        )
        verdict = "PASSED" if code == 0 else "FAILED"
        lines.append(
            f"perfgate: A/B {verdict}: {self.b.profile.name} (B) against "
            f"{self.a.profile.name} (A), tolerance {self.tolerance:.0%}"
        )
        lines.append(f"perfgate: run JSON (both sides) written to {self.b.run_path}")
        lines += self.b.recorder.write_reports(
            summary_paths=summary_paths, plots=plots, artifact_url=artifact_url, reports=reports
        )
        return Outcome(code, lines)
