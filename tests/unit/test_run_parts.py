"""The run's parts, each built alone from what it needs (no server, no pytest): the notes
sink, the settings, the baseline choice and its policy, the recorder; and the end of a
whole run in the session (``gate``, ``conclude``) on synthetic level runs."""

from __future__ import annotations

import pytest

from perfgate.errors import ProfileError
from perfgate.gate.policy import GateExit
from perfgate.profile import load_profile
from perfgate.results.run import RunRecord
from perfgate.run.baselines import BaselineChoice
from perfgate.run.notes import Notes
from perfgate.run.recording import Recorder
from perfgate.run.session import PerfgateSession
from perfgate.run.settings import GateOptions, RunSettings
from tests.helpers import ROOT
from tests.unit.test_figures import FAST, _sweep

SLOW = [2 * t for t in FAST]  # TTFT doubled: regressed against a FAST baseline


def _profile(**workload):
    profile = load_profile("llamacpp-gemma3-270m", ROOT / "profiles")
    w = profile.workload.model_copy(update={"levels": [4], **workload})
    return profile.model_copy(update={"workload": w})


def _settings(tmp_path, **kwargs) -> RunSettings:
    return RunSettings.build(
        _profile(), root=ROOT, baselines_dir=tmp_path / "b", output_dir=tmp_path / "o", **kwargs
    )


def _session(tmp_path, *, update: bool = False, said: list[str] | None = None, **kwargs):
    return PerfgateSession(
        _profile(),
        root=ROOT,
        baselines_dir=tmp_path / "b",
        output_dir=tmp_path / "o",
        update_baselines=update,
        progress=(said.append if said is not None else lambda _: None),
        **kwargs,
    )


def _recorded(tmp_path, runs=(FAST,) * 4) -> None:
    """A baseline for hardware key ``hw`` under ``tmp_path/b``, recorded from ``runs``."""
    rec = _session(tmp_path, update=True)
    rec.resolve_baseline({"key": "hw", "host_id": "here"})
    rec.run.measurements = {"sweep": _sweep(list(runs)), "rate": _sweep(list(runs))}
    rec.perf_selected = True
    outcome = rec.conclude(0, plots=False)
    assert outcome.exit_code == 0 and any("baseline written" in x for x in outcome.lines)


def test_notes_say_each_message_once_and_keep_warnings_apart():
    said: list[str] = []
    run = RunRecord(
        perfgate_version="0", profile={}, profile_digest="", engine="x", launcher="attach",
        git_commit=None, hardware={},
    )  # fmt: skip
    notes = Notes(run, said.append)
    for _ in range(3):
        notes.warn("no tokenizer")
        notes.say("no GPU telemetry: NVML absent")
        notes.keep("gated by any.json")
    assert run.notes == ["no tokenizer", "no GPU telemetry: NVML absent", "gated by any.json"]
    assert run.warnings == ["no tokenizer"]
    assert said == ["perfgate: warning: no tokenizer", "perfgate: no GPU telemetry: NVML absent"]


def test_settings_are_checked_before_anything_starts(tmp_path):
    profile = _profile()
    bad = profile.model_copy(update={"gate": profile.gate.model_copy(update={"figures": ["x"]})})
    with pytest.raises(ProfileError, match=r"gate\.figures has unknown x"):
        RunSettings.build(bad, root=ROOT, baselines_dir=tmp_path, output_dir=tmp_path)
    settings = _settings(tmp_path)
    assert settings.repeats == profile.gate.repeats and settings.abort_below > 0
    recording = _settings(tmp_path, update_baselines=True, options=GateOptions(abort_below=0.9))
    assert recording.repeats == profile.gate.record_repeats and recording.abort_below == 0.0
    assert _settings(tmp_path, options=GateOptions(repeats=7)).policy().min_runs == 7
    assert settings.planned() == {"single": [1], "sweep": [4]}
    assert settings.history_dir == tmp_path / "o" / "history"


def test_the_baseline_choice_builds_its_policy_once_it_knows_the_host(tmp_path):
    _recorded(tmp_path)
    choice = BaselineChoice(_settings(tmp_path))
    assert choice.baseline is None and choice.tier == "none" and not choice.policy.another_host
    ref = choice.resolve({"key": "hw", "host_id": "here"})
    assert (choice.tier, ref.tier, ref.scope) == ("exact", "exact", choice.reach.scope)
    assert not choice.policy.another_host and "gated by the exact baseline" in choice.tier_note()
    assert choice.gate.baseline is choice.baseline is choice.known["hw"]  # bound at the choice
    elsewhere = BaselineChoice(_settings(tmp_path))
    elsewhere.resolve({"key": "hw", "host_id": "another"})
    assert elsewhere.another_host and elsewhere.policy.another_host  # hosts' spread counts
    assert elsewhere.gate.policy is elsewhere.policy
    unknown = BaselineChoice(_settings(tmp_path))
    unknown.resolve({"key": "other-hw"})
    assert unknown.tier in ("any", "none") and "Record" in unknown.tier_note()


def test_the_recorder_refuses_a_failed_run_and_writes_nothing(tmp_path):
    settings = _settings(tmp_path, update_baselines=True)
    choice = BaselineChoice(settings)
    choice.resolve({"key": "hw"})
    run = _session(tmp_path).run
    run.measurements = {"sweep": _sweep([FAST] * 4)}
    run.status = "failed"
    recorder = Recorder(settings, choice, run, tmp_path / "run.json")
    lines = recorder.record_baseline()
    assert recorder.refused and lines[0].startswith("perfgate: baseline NOT updated: the run")
    assert not choice.path.exists()
    run.status = "passed"
    written = Recorder(settings, choice, run, tmp_path / "r.json").record_baseline()
    assert "baseline written" in written[0]
    assert choice.path.exists()


def test_a_whole_run_ends_in_the_session_with_the_gate_s_exit_code(tmp_path):
    """Recorded, then gated on the same runs (passes: exit 0), on doubled TTFTs (gate()
    fails with the table; conclude: exit 1), with a measurement not run (MISSING: 11), and
    with no baseline for the host (11 too); a session that touched no server keeps the
    runner's status."""
    _recorded(tmp_path)

    def ended(runs, measured=("sweep", "rate"), key="hw"):
        run = _session(tmp_path)
        run.resolve_baseline({"key": key, "host_id": "here"})
        run.perf_selected = True
        run.run.measurements = {name: _sweep(runs) for name in measured}
        gated = run.gate("sweep")
        failed = gated.failed
        return run, gated, run.conclude(1 if failed else 0, plots=False)

    run, gated, outcome = ended([FAST] * 3)
    assert not gated.failed and gated.checks and outcome.exit_code == 0
    assert run.run.status == "passed" and run.run_path.exists()
    assert any(line.startswith("perfgate: run JSON written to") for line in outcome.lines)

    run, gated, outcome = ended([SLOW] * 3)
    assert gated.failed and "sweep.c4.ttft_s" in gated.text and "TTFT(s)" in gated.text
    assert gated.text.startswith("perfgate: sweep failed on profile llamacpp-gemma3-270m:")
    assert outcome.exit_code == GateExit.REGRESSED and run.run.status == "failed"
    assert run.run.diagnosis is not None  # a failed run is diagnosed in its JSON

    _, _, outcome = ended([FAST] * 3, measured=("sweep",))  # the rate's figures: MISSING
    assert outcome.exit_code == GateExit.MISSING
    _, _, outcome = ended([FAST] * 3, key="no-such-host")
    assert outcome.exit_code == GateExit.MISSING  # no baseline applies: nothing was gated

    untouched = _session(tmp_path)
    assert untouched.conclude(5).exit_code == 5 and not untouched.run_path.exists()


def test_a_measurement_is_refused_without_a_baseline_or_from_an_unusable_server(tmp_path):
    run = _session(tmp_path)
    run.resolve_baseline({"key": "no-baseline-here"})
    assert run.baseline is None  # (tmp_path's baselines hold no any.json)
    assert run.refusal()[0] == "fail" and "Record one with" in run.refusal()[1]
    allowed = _session(tmp_path, options=GateOptions(allow_no_baseline=True))
    allowed.resolve_baseline({"key": "no-baseline-here"})
    assert allowed.refusal()[0] == "skip"
    usable = _session(tmp_path, update=True)
    usable.resolve_baseline({"key": "hw"})
    assert usable.refusal() is None
    usable.correctness_failed("test_sanity", usability=True, ran=True)
    how, why = usable.refusal()
    assert how == "fail" and "unusable" in why and "test_sanity" in why
    assert usable.answered_wrongly and usable.correctness_failures == ["test_sanity"]


def test_the_checks_on_a_level_run_say_what_went_wrong():
    """A rate level whose requests left up to 40 ms after their schedule, with a cap of 2
    in flight: the cap is named; without a cap, the client. Outputs 10 tokens long where
    the workload asks for 64 are short (where lengths are not forced). The rate so far
    is tokens a second where every request streams output_len, else requests."""
    from perfgate.client import RequestRecord
    from perfgate.load.level import LevelRun, Tally
    from perfgate.measure.data import LevelData
    from perfgate.run.requests import behind_schedule, rate_text, short_output_problem
    from perfgate.workload.kinds import prompt_kind

    records = []
    for i in range(8):
        due = i * 0.1
        times = [due + 0.04 * (i % 2) + 0.05 + k * 0.02 for k in range(10)]
        records.append(
            RequestRecord(
                index=i, start=due, end=times[-1], token_times=times, completion_tokens=10,
                finish_reason="length", scheduled=due, sent=due + 0.04 * (i % 2),
            )
        )  # fmt: skip
    level = LevelRun(0, records, 0.0, records[-1].end, rate=10.0)
    data = LevelData.from_run(level)
    capped = _profile()
    capped = capped.model_copy(
        update={"workload": capped.workload.model_copy(update={"max_in_flight": 2})}
    )
    late = behind_schedule(capped, "rate", data)
    assert late is not None and "all 2 requests in flight allowed" in late and "40 ms" in late
    assert "the client could not send on time" in (behind_schedule(_profile(), "rate", data) or "")
    on_time = LevelData.from_run(LevelRun(0, records[::2], 0.0, records[-2].end, rate=10.0))
    assert behind_schedule(capped, "rate", on_time) is None

    profile = _profile()
    kind = prompt_kind(profile.workload.prompts)
    short = short_output_problem(profile, kind, data, forced=False)
    assert short is not None and "output tokens" in short
    assert short_output_problem(profile, kind, data, forced=True) is None

    tally = Tally(2)
    tally.begin("measure", 10)
    assert rate_text(profile, kind, tally, forced=True) == ""  # nothing done yet
    tally.add(False)
    tally.started -= 1.0  # one second in
    assert rate_text(profile, kind, tally, forced=True).endswith("tok/s")
    assert rate_text(profile, kind, tally, forced=False).endswith("req/s")


def test_the_end_of_the_run_judges_nothing_twice(tmp_path, monkeypatch):
    """gate() judges every baseline figure; conclude() after it reuses those checks. A
    measurement after the last gate() (or none gated) is judged at the end."""
    _recorded(tmp_path)
    run = _session(tmp_path)
    run.resolve_baseline({"key": "hw", "host_id": "here"})
    run.perf_selected = True
    judged = []
    verdicts = run.verdicts
    monkeypatch.setattr(run, "verdicts", lambda: judged.append(1) or verdicts())
    run.run.measurements = {"sweep": _sweep([FAST] * 3)}
    run.gate("sweep")
    run.conclude(0, plots=False)
    assert len(judged) == 1 and run.run.checks
    again = _session(tmp_path)
    again.resolve_baseline({"key": "hw", "host_id": "here"})
    again.perf_selected = True
    again.run.measurements = {"sweep": _sweep([FAST] * 3)}
    again.gate("sweep")
    again.run.measurements["rate"] = _sweep([FAST] * 3)  # measured, never gated
    outcome = again.conclude(0, plots=False)
    assert {c.key.split(".")[0] for c in again.run.checks if c.verdict == "pass"} == {
        "sweep",
        "rate",
    } and outcome.exit_code == 0
