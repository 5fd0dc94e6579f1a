"""What a run leaves: a new baseline (all or nothing), golden outputs, the history line,
plots and the Markdown summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfgate import __version__
from perfgate.correctness.golden import GoldenOutputs, compare_golden, golden_path, save_golden
from perfgate.errors import BaselineError, PerfgateError
from perfgate.gate.baseline import save_baseline
from perfgate.gate.creep import apply_creep_rule
from perfgate.gate.recording import build_baseline, diff_lines, too_tight
from perfgate.gate.values import run_values
from perfgate.render.formats import Context, find_format
from perfgate.render.markdown import markdown_summary
from perfgate.results.history import (
    HistoryEntry,
    append_entry,
    entry_from_run,
    history_path,
    load_history,
)
from perfgate.results.run import RunRecord
from perfgate.run.baselines import BaselineChoice
from perfgate.run.settings import RunSettings


class Recorder:
    """What a run leaves behind, from its record: a new baseline and golden outputs (when
    asked), the history line, the plots and the Markdown summary."""

    def __init__(
        self, settings: RunSettings, choice: BaselineChoice, run: RunRecord, run_path: Path
    ) -> None:
        self.settings = settings
        self.profile = settings.profile
        self.choice = choice
        self.run = run
        self.run_path = run_path
        self.golden_outputs: GoldenOutputs | None = None  # produced by this run
        self.refused = False  # --perf-update-baselines wrote nothing: the build fails
        # the earlier runs the slow-creep rule reads: checked now, before any server starts
        self.history: list[HistoryEntry] = (
            load_history(history_path(settings.history_dir, settings.profile.name))
            if settings.profile.gate.creep_runs
            else []
        )

    def _relative(self, path: Path) -> str:
        return self.settings.relative(path)

    def record_baseline(self) -> list[str]:
        """Write a new baseline from this run, all or nothing; returns the lines to print.

        Only a passed run with every measurement complete is recorded. Its figures are
        merged into the existing baseline (figures it did not measure are kept).
        """
        refuse = "perfgate: baseline NOT updated: "
        choice, run = self.choice, self.run
        problems = choice.policy.recording_problems(
            run.measurements, status=run.status, correctness_failures=run.correctness_failures
        )
        golden_only = (
            not self.run.measurements
            and self.golden_outputs is not None
            and self.run.status == "passed"
            and not self.run.correctness_failures
        )
        if problems and golden_only:  # e.g. `pytest -m correctness --perf-update-baselines`
            return [
                "perfgate: no performance measured in this run: baseline figures unchanged",
                *self._record_golden(),
            ]
        if problems:
            self.refused = True
            lines = [refuse + problems[0], *(f"  also: {p}" for p in problems[1:])]
            regressed = [c.key for c in self.run.checks if c.verdict == "regressed"]
            exact = choice.tier == "exact"
            if regressed and exact and not self.run.correctness_failures:
                named = ", ".join(regressed[:3]) + (", ..." if len(regressed) > 3 else "")
                lines.append(
                    f"  it regressed against {self._relative(choice.path)} ({named}). "
                    "To accept slower figures on purpose, remove that file (git keeps the old "
                    "one) and record again."
                )
            return lines
        previous = choice.known.get(choice.hardware_key)
        kept_run = choice.path.with_suffix(".run.json.gz")
        try:
            recorded = build_baseline(
                self.profile.name,
                choice.hardware_key,
                run_values(self.run.measurements, choice.policy.chosen(previous)),
                previous,
                rule=choice.policy.rule(None),
                tolerance=self.settings.options.tolerance,
                facts=self.run.facts,
                min_tolerance=self.profile.gate.min_tolerance,
                host_id=str(choice.hardware.get("host_id") or ""),
                provenance={
                    "perfgate_version": __version__,
                    "git_commit": self.run.git_commit,
                    "profile": self.run.profile,
                    "profile_digest": self.run.profile_digest,
                    "engine": self.run.engine,
                    "engine_version": self.run.engine_version,
                    "model": self.profile.model.name,
                    "hardware": choice.hardware,
                    "run_json": self._relative(kept_run),
                },
            )
        except BaselineError as exc:
            self.refused = True
            return [refuse + str(exc)]
        save_baseline(choice.path, recorded.baseline)
        self.run.write_compressed(kept_run)  # the raw records, compact, beside the figures
        lines = [
            f"perfgate: baseline written to {self._relative(choice.path)} "
            f"({len(recorded.baseline.metrics)} figures; tolerances from "
            f"{self.settings.repeats} runs a level):",
            *diff_lines(previous, recorded),
            *too_tight(recorded.baseline, recorded.supported),
        ]
        lines += self._record_golden()
        # choice.baseline stays the old one: the summary table shows old vs measured
        return lines

    def _record_golden(self) -> list[str]:
        """Write this run's golden outputs next to the baseline; the lines to print (each
        changed output, with where it changed)."""
        if self.golden_outputs is None:
            return []
        lines = []
        path = golden_path(self.choice.path)
        if (old := self.choice.golden) is not None:  # the file recording replaces
            changed = [d for d in compare_golden(old, self.golden_outputs.outputs) if not d.exact]
            lines += [f"perfgate: golden output changed: {d.message()}" for d in changed]
        save_golden(path, self.golden_outputs)
        lines.append(
            f"perfgate: {len(self.golden_outputs.outputs)} golden greedy outputs "
            f"written to {self._relative(path)}"
        )
        return lines

    def apply_creep_rule(self) -> None:
        """The slow-creep rule (when the profile sets ``gate.creep_runs``): this run's
        passing figures that have been worse than the baseline by more than the margin
        for that many runs in a row, in the profile's history, become CREEP."""
        gate = self.profile.gate
        if gate.creep_runs and self.run.checks and not self.settings.update_baselines:
            self.run.checks = apply_creep_rule(
                self.run.checks,
                self.history,
                runs=gate.creep_runs,
                margin=gate.creep_margin,
                hardware_key=self.choice.hardware_key,
            )

    def append_history(self) -> list[str]:
        """This run's judged figures and provenance appended to the profile's history;
        returns the lines to print. Interrupted runs and recordings add nothing."""
        path = history_path(self.settings.history_dir, self.profile.name)
        if self.settings.update_baselines or self.run.status in ("interrupted", "running"):
            return []
        entry = entry_from_run(self.run, self._relative(self.run_path))
        if entry is None:
            return []
        try:
            append_entry(path, entry)
        except OSError as exc:
            return [f"perfgate: could not append to the history {path}: {exc}"]
        return [f"perfgate: history appended to {self._relative(path)}"]

    def write_reports(
        self,
        *,
        summary_paths: Sequence[Path] = (),
        plots: bool = True,
        artifact_url: str | None = None,
        reports: Sequence[str] = (),
    ) -> list[str]:
        """The run's reports in each format of ``reports`` (:mod:`perfgate.render.formats`,
        next to the run JSON), its plots (the ``plots`` format, unless ``plots`` is false),
        and its Markdown summary (appended to each of ``summary_paths``, e.g.
        ``$GITHUB_STEP_SUMMARY``; ``artifact_url``: where CI keeps the files), all computed
        from the run JSON; returns the lines to print."""
        lines: list[str] = []
        files: list[str] = []
        context = Context(
            run_json=self._relative(self.run_path),
            artifact_url=artifact_url,
            root=self.settings.root,
        )
        names = list(dict.fromkeys(reports))
        if plots and self.run.measurements and "plots" not in names:
            names.append("plots")  # the default format of a gated run (--perf-no-plots: none)
        for name in names:
            fmt = find_format(name)
            try:
                paths = fmt.write(self.run, self.run_path, context)
            except PerfgateError as exc:  # the plots' extra not installed
                lines.append(f"perfgate: no {name}: {exc}")
                continue
            except OSError as exc:
                where = self._relative(self.run_path.with_suffix(fmt.file_suffix))
                why = f"could not write the {name} report to {where}"
                lines.append(f"perfgate: {f'no {name}' if fmt.files else why}: {exc}")
                continue
            written = [self._relative(path) for path in paths]
            files += written
            if fmt.files is None:
                lines.append(f"perfgate: {name} report written to {written[0]}")
            elif written:
                lines.append(f"perfgate: {name} written: {', '.join(written)}")
            else:
                lines.append(f"perfgate: no {name}: {fmt.nothing}")
        markdown = markdown_summary(
            self.run, run_json=self._relative(self.run_path), files=files, artifact_url=artifact_url
        )
        for path in summary_paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as out:
                    out.write(markdown + "\n")
            except OSError as exc:
                lines.append(f"perfgate: could not write the Markdown summary to {path}: {exc}")
            else:
                lines.append(f"perfgate: Markdown summary written to {path}")
        return lines
