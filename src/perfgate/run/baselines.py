"""A run's settings and its baseline: runs a level, the gate policy, and which baseline
(exact, hardware-independent, none) gates the serving host."""

from __future__ import annotations

from perfgate.correctness.golden import golden_path, load_golden
from perfgate.gate.baseline import ANY_HARDWARE, baseline_path
from perfgate.gate.policy import GatePolicy, Reach, choose_baseline, reach
from perfgate.results.run import BaselineRef
from perfgate.run.state import SessionState, gate_policy


class BaselineSettings(SessionState):
    """Settings from the profile and the command line; the baseline for the host."""

    # -- settings ----------------------------------------------------------------------
    @property
    def repeats(self) -> int:
        """Runs of each level before a verdict (when recording: ``gate.record_repeats``)."""
        if self.options.repeats:
            return self.options.repeats
        gate = self.profile.gate
        return gate.record_repeats if self.update_baselines else gate.repeats

    @property
    def abort_below(self) -> float:
        """Fraction of the baseline's tok/s under which a sweep stops at once (never while
        recording a new baseline: a slower engine may be accepted on purpose)."""
        if self.update_baselines:
            return 0.0
        if self.options.abort_below is not None:
            return self.options.abort_below
        return self.profile.gate.abort_below

    @property
    def policy(self) -> GatePolicy:
        """The gate policy from the profile's settings and the command line."""
        return gate_policy(
            self.profile,
            self.repeats,
            abort_below=self.abort_below,
            recording=self.update_baselines,
            another_host=self.another_host,
        )

    @property
    def reach(self) -> Reach:
        """What this run's comparison can catch: same host, another host, floors only."""
        return reach(self.baseline, self.baseline_tier, self.policy)

    @property
    def another_host(self) -> bool:
        """Whether the exact baseline was recorded on another host than this run's server
        (or either host is unknown): the spread between hosts then adds to the noise."""
        if self.baseline is None or self.baseline_tier != "exact":
            return False
        here = str(self.hardware.get("host_id") or "")
        return not here or self.baseline.provenance.get("host_id") != here

    def planned(self) -> dict[str, list[int | float]]:
        """The levels each measurement of the perf suite runs (``rate``: request rates)."""
        w = self.profile.workload
        planned: dict[str, list[int | float]] = {"single": [1], "sweep": list(w.levels)}
        if w.rates:
            planned["rate"] = [float(r) for r in w.rates]
        if self.profile.capacity is not None:
            planned["capacity"] = []  # measurement-wide: no levels
        return planned

    def record_command(self) -> str:
        """The command that records a baseline for this profile here."""
        extra = f" --perf-base-url {self.base_url}" if self.base_url else ""
        hw = f" --perf-hardware {self.hardware_key}" if self.options.hardware else ""
        return f"perfgate run {self.profile.name}{extra}{hw} --perf-update-baselines"

    def resolve_baseline(self, hardware: dict[str, object]) -> None:
        """Pick the baseline for the serving host's hardware: the exact key, else the
        profile's hardware-independent ``any`` targets, else none."""
        key = self.options.hardware or str(hardware.get("key") or "")
        if not key:
            key = self.profile.hardware
            hardware = {**hardware, "key": key, "key_from": "profile hardware label"}
        self.hardware = {**hardware, "key": key, "label": self.profile.hardware}
        self.hardware_key = key
        self.run.hardware = self.hardware
        self.baseline, self.baseline_tier = choose_baseline(self.known_baselines, key)
        self.baseline_path = baseline_path(self.baselines_dir, self.profile.name, key)
        self.golden = load_golden(golden_path(self.baseline_path))
        self.run.notes.append(self.tier_note())
        kept = self.baseline.provenance.get("run_json") if self.baseline else None
        gating = self.baseline_path
        if self.baseline_tier == "any":
            gating = baseline_path(self.baselines_dir, self.profile.name, ANY_HARDWARE)
        reach = self.reach
        self.run.baseline = BaselineRef(
            hardware_key=key,
            tier=self.baseline_tier,
            path=self._relative(gating),
            run_json=str(kept) if kept and self.baseline_tier == "exact" else None,
            scope=reach.scope,
            host_spread=reach.host_spread,
            detectable=reach.detectable,
        )

    def tier_note(self) -> str:
        """Which baseline gates this run, and how to get an exact one."""
        where = f"hardware key {self.hardware_key!r}"
        if self.hardware.get("key_from"):  # a remote attached server: perfgate cannot look
            where += (
                f" (the profile's label: the server at {self.base_url} is on another host; "
                "name its key with --perf-hardware KEY)"
            )
        if self.baseline_tier == "exact":
            return (
                f"gated by the exact baseline for {where} ({self._relative(self.baseline_path)})"
                f": {self.reach.describe()}"
            )
        others = sorted(k for k in self.known_baselines if k != ANY_HARDWARE)
        recorded = f"; baselines exist for {', '.join(others)}" if others else ""
        if self.baseline_tier == "any":
            return (
                f"no exact baseline for {where}{recorded}: gated by the profile's "
                f"hardware-independent targets ({ANY_HARDWARE}.json). Record an exact one "
                f"with: {self.record_command()}"
            )
        return f"no baseline for {where}{recorded}. Record one with: {self.record_command()}"

    def hardware_mismatch(self) -> str | None:
        """Why figures cannot be judged here, or None (a baseline applies, or one is being
        recorded)."""
        if self.baseline is not None or self.update_baselines:
            return None
        return (
            f"no baseline for profile {self.profile.name} on this hardware "
            f"({self.hardware_key}). A different machine is not a regression, but nothing "
            f"was gated. Record one with: {self.record_command()} (or pass "
            "--perf-allow-no-baseline to skip the perf tests instead of failing)"
        )
