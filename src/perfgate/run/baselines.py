"""Which baseline gates this run: the serving host's exact one, the profile's
hardware-independent targets, or none; and the gate (the policy bound to that baseline),
built once from that choice."""

from __future__ import annotations

from pathlib import Path

from perfgate.correctness.golden import GoldenOutputs, golden_path, load_golden
from perfgate.gate.baseline import ANY_HARDWARE, Baseline, baseline_path, load_profile_baselines
from perfgate.gate.policy import BaselineGate, GatePolicy, Reach, Tier, choose_baseline, reach
from perfgate.results.run import BaselineRef
from perfgate.run.settings import RunSettings


class BaselineChoice:
    """The profile's baselines, read at once; the one for the serving host, chosen when the
    server's hardware is known (:meth:`resolve`). ``gate`` is the gate policy bound to the
    chosen baseline, built once by :meth:`resolve` (on another host, the spread between
    hosts adds to the noise); before it, the settings' policy with no baseline."""

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        name = settings.profile.name
        self.known: dict[str, Baseline] = load_profile_baselines(settings.baselines_dir, name)
        self.hardware: dict[str, object] = {"label": settings.profile.hardware}
        self.hardware_key = ""  # set by resolve: "" until the serving host is known
        self.baseline: Baseline | None = None
        self.tier: Tier = "none"
        self.path: Path = baseline_path(settings.baselines_dir, name, ANY_HARDWARE)
        self.golden: GoldenOutputs | None = None  # the golden outputs recorded beside it
        self.gate = BaselineGate(settings.policy())

    @property
    def another_host(self) -> bool:
        """Whether the exact baseline was recorded on another host than this run's server
        (or either host is unknown): the spread between hosts then adds to the noise."""
        if self.baseline is None or self.tier != "exact":
            return False
        here = str(self.hardware.get("host_id") or "")
        return not here or self.baseline.provenance.get("host_id") != here

    @property
    def policy(self) -> GatePolicy:
        """The gate's policy: the profile's ``[gate]`` settings, for the chosen host."""
        return self.gate.policy

    @property
    def reach(self) -> Reach:
        """What this run's comparison can catch: same host, another host, floors only."""
        return reach(self.baseline, self.tier, self.policy)

    def record_command(self) -> str:
        """The command that records a baseline for this profile here."""
        return self.settings.record_command(self.hardware_key)

    def resolve(self, hardware: dict[str, object]) -> BaselineRef:
        """Pick the baseline for the serving host's hardware: the exact key, else the
        profile's hardware-independent ``any`` targets, else none; the policy follows.
        Returns the reference the run JSON keeps."""
        s = self.settings
        key = s.options.hardware or str(hardware.get("key") or "")
        if not key:
            key = s.profile.hardware
            hardware = {**hardware, "key": key, "key_from": "profile hardware label"}
        self.hardware = {**hardware, "key": key, "label": s.profile.hardware}
        self.hardware_key = key
        self.baseline, self.tier = choose_baseline(self.known, key)
        self.path = baseline_path(s.baselines_dir, s.profile.name, key)
        self.golden = load_golden(golden_path(self.path))
        self.gate = BaselineGate(s.policy(another_host=self.another_host), self.baseline)
        kept = self.baseline.provenance.get("run_json") if self.baseline else None
        gating = self.path
        if self.tier == "any":
            gating = baseline_path(s.baselines_dir, s.profile.name, ANY_HARDWARE)
        scope = self.reach
        return BaselineRef(
            hardware_key=key,
            tier=self.tier,
            path=s.relative(gating),
            run_json=str(kept) if kept and self.tier == "exact" else None,
            scope=scope.scope,
            host_spread=scope.host_spread,
            detectable=scope.detectable,
        )

    def tier_note(self) -> str:
        """Which baseline gates this run, and how to get an exact one."""
        s = self.settings
        where = f"hardware key {self.hardware_key!r}"
        if self.hardware.get("key_from"):  # a remote attached server: perfgate cannot look
            where += (
                f" (the profile's label: the server at {s.base_url} is on another host; "
                "name its key with --perf-hardware KEY)"
            )
        if self.tier == "exact":
            return (
                f"gated by the exact baseline for {where} ({s.relative(self.path)})"
                f": {self.reach.describe()}"
            )
        others = sorted(k for k in self.known if k != ANY_HARDWARE)
        recorded = f"; baselines exist for {', '.join(others)}" if others else ""
        if self.tier == "any":
            return (
                f"no exact baseline for {where}{recorded}: gated by the profile's "
                f"hardware-independent targets ({ANY_HARDWARE}.json). Record an exact one "
                f"with: {self.record_command()}"
            )
        return f"no baseline for {where}{recorded}. Record one with: {self.record_command()}"

    def hardware_mismatch(self) -> str | None:
        """Why figures cannot be judged here, or None (a baseline applies, or one is being
        recorded)."""
        if self.baseline is not None or self.settings.update_baselines:
            return None
        return (
            f"no baseline for profile {self.settings.profile.name} on this hardware "
            f"({self.hardware_key}). A different machine is not a regression, but nothing "
            f"was gated. Record one with: {self.record_command()} (or pass "
            "--perf-allow-no-baseline to skip the perf tests instead of failing)"
        )
