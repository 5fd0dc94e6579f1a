"""Side-by-side (A/B) runs through two sessions on injected transports (two llama-server
stand-ins, tests/mock_llamacpp.py): no socket, no process. The effects here are large
(4x, or none at a 50% tolerance); the paired verdict's fine-grained rates are the gate
study's (tests/unit/test_paired.py)."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from perfgate.errors import ProfileError
from perfgate.render.formats import Context
from perfgate.render.formats.text import text_report
from perfgate.results.run import RunRecord
from perfgate.run.ab import ABOptions, ABRun, ReferenceUnavailable
from tests.mock_llamacpp import MockLlamaServer
from tests.unit.test_run_on_mock import _profile, _session, no_socket  # noqa: F401 (autouse)


class Recording(MockLlamaServer):
    """The stand-in, keeping every streamed (measured) prompt it was sent."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.prompts: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions":
            body = json.loads(request.content)
            if body.get("stream"):
                self.prompts.append(body["prompt"])
        return super().handle(request)


QUICK = {"ttft_s": 0.002, "itl_s": 0.0005}  # a tenth of the stand-in's delays: for tests
# that count requests or compare answers, not timings


def ab(tmp_path, a_server, b_server, said, **options):
    a = _session(tmp_path, a_server, name="a", said=said)
    b = _session(tmp_path, b_server, name="b", said=said)
    return ABRun(a, b, ABOptions(**options), progress=said.append)


def test_b_four_times_slower_fails_after_its_first_block_naming_it(tmp_path):
    said: list[str] = []
    a_server, b_server = Recording(), Recording(slow=4.0)
    run = ab(tmp_path, a_server, b_server, said)
    a, b = run.measure()
    outcome = run.conclude(summary_paths=[tmp_path / "summary.md"])
    assert outcome.exit_code == 1, outcome.lines
    plot = run.b.run_path.with_suffix(".b-over-a.png")  # B/A per level, with its interval
    assert plot.is_file() and any(plot.name in line for line in outcome.lines), outcome.lines
    summary = (tmp_path / "summary.md").read_text()  # as $GITHUB_STEP_SUMMARY gets it
    assert "side by side against A `llamacpp-gemma3-270m`" in summary, summary
    assert "| figure | A | measured |" in summary and "❌ regressed" in summary
    assert len(a.levels) == len(b.levels) == 2  # one block: A B B A (warm-ups left out)
    assert any("early stop at C=2" in line and "B far worse" in line for line in said), said
    regressed = {c.key: c for c in run.checks if c.verdict == "regressed"}
    assert "sweep.c2.agg_tok_s" in regressed, [c.message() for c in run.checks]
    assert "A " in regressed["sweep.c2.agg_tok_s"].message()  # judged against A, not a baseline
    # the same prompts on both sides, pair by pair
    assert sorted(a_server.prompts) == sorted(b_server.prompts) and a_server.prompts
    saved = RunRecord.model_validate_json(run.b.run_path.read_text())
    assert saved.status == "failed" and saved.reference is not None
    assert len(saved.reference.measurements["sweep"].levels) == 2
    assert not (tmp_path / "a" / "runs").exists()  # one run JSON, B's, holding both
    assert any("A/B FAILED" in line for line in outcome.lines)
    report = text_report(saved, Context(str(run.b.run_path)))  # `perfgate report` of it
    assert "B [sweep]" in report and "A [sweep]" in report and "perfgate A/B: sweep" in report


def test_the_same_server_on_both_sides_passes_after_the_minimum_pairs(tmp_path):
    said: list[str] = []
    run = ab(tmp_path, Recording(), Recording(), said, tolerance=0.5)
    a, b = run.measure()
    outcome = run.conclude(plots=False)
    assert outcome.exit_code == 0, outcome.lines
    assert len(a.levels) == len(b.levels) == 8  # min_pairs, in whole ABBA blocks
    assert {c.verdict for c in run.checks} <= {"pass", "improved"}
    table = next(line for line in outcome.lines if line.startswith("perfgate A/B: sweep"))
    assert "B/A" in table and "95% CI" in table and "PASS" in table
    assert any(line.startswith("perfgate: A/B PASSED") for line in outcome.lines)
    assert any("A sweep C=2 warm-up 1" in line for line in said), said[:6]


def test_profiles_that_differ_in_model_or_workload_are_refused_naming_the_fields(tmp_path):
    a = _session(tmp_path, MockLlamaServer(), name="a")
    other = a.profile.workload.model_copy(update={"output_len": 99})
    b = _session(tmp_path, MockLlamaServer(), name="b", more={"workload": other})
    with pytest.raises(ProfileError, match=r"workload.output_len: A 8, B 99.*--allow-model-change"):
        ABRun(a, b)
    ABRun(a, b, ABOptions(allow_model_change=True))  # asked for: allowed


def test_a_reference_that_cannot_start_is_not_a_regression_of_b(tmp_path):
    broken = MockLlamaServer(broken=("/health", "/v1/models", "/props"))
    never = {"timeouts": _profile().timeouts.model_copy(update={"startup_s": 0.0})}
    a = _session(tmp_path, broken, name="a", more=never)
    run = ABRun(a, _session(tmp_path, MockLlamaServer(), name="b"))
    with pytest.raises(ReferenceUnavailable, match="A \\(the reference\\) could not start"):
        run.measure()
    outcome = run.conclude(status=1)  # as pytest ends it: the test that measured failed
    assert outcome.exit_code == 4 and "B was not judged" in outcome.lines[0], outcome


class Rewording(Recording):
    """The stand-in whose greedy (non-streamed) answer to one prompt changed."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = super().handle(request)
        if request.url.path == "/v1/completions":
            body = json.loads(request.content)
            if not body.get("stream") and "France" in str(body.get("prompt")):
                data = response.json()
                data["choices"][0]["text"] = " a different answer"
                return httpx.Response(200, json=data)
        return response


def test_b_whose_greedy_answer_changed_fails_correctness_naming_the_prompt(tmp_path):
    said: list[str] = []
    run = ab(tmp_path, Recording(**QUICK), Rewording(**QUICK), said, tolerance=0.5, max_pairs=8)
    run.measure()
    run.measure("again")  # a second measurement: the answers were compared once
    outcome = run.conclude(plots=False)
    assert sum("greedy answers against A's" in line for line in said) == 1, said
    assert outcome.exit_code == 12, outcome.lines  # the correctness exit code
    text = "\n".join(outcome.lines)
    assert "B's greedy answers differ from A's" in text and "a different answer" in text, text
    assert run.b.run.correctness_failures == ["ab: greedy answers against A"]


def test_b_profiles_ab_section_sets_the_rule_and_flags_override_it(tmp_path):
    ab_spec = _profile().ab.model_copy(update={"tolerance": 0.3, "max_pairs": 12})
    b = _session(tmp_path, MockLlamaServer(), name="b", more={"ab": ab_spec})
    a = _session(tmp_path, MockLlamaServer(), name="a", more={"ab": ab_spec})
    run = ABRun(a, b)
    assert run.tolerance == 0.3 and run.policy.rule.max_pairs == 12
    assert run.policy.rule.looks == (8, 12)
    flagged = ABRun(a, b, ABOptions(tolerance=0.05, max_pairs=18))
    assert flagged.tolerance == 0.05 and flagged.policy.rule.max_pairs == 18
    with pytest.raises(ProfileError, match="max_pairs 6 is below min_pairs 8"):
        ABRun(a, b, ABOptions(max_pairs=6))


def test_a_reference_that_answers_wrongly_leaves_b_unjudged(tmp_path):
    """What the plugin does when an ``[A]`` correctness check fails (it reports the
    failure on A's session, pytest_runtest_makereport): the levels are not measured, and
    the run ends with the usage exit code, naming the check, not as B's regression."""
    run = ab(tmp_path, Recording(), Recording(), [])
    assert run.refusal() is None
    check = "suites/correctness/test_smoke.py::test_known_answer[A-capital]"
    run.a.correctness_failed(check, usability=True, ran=True)
    how, why = run.refusal()
    assert how == "fail" and "A (the reference) is unusable" in why and check in why
    outcome = run.conclude(status=1)
    assert outcome.exit_code == 4, outcome.lines
    assert "A (the reference) failed its correctness checks" in outcome.lines[0]
    assert check in outcome.lines[0] and "B was not judged" in outcome.lines[0]


def test_perfgate_ab_is_the_pytest_run_with_its_flags(tmp_path, monkeypatch):
    """``perfgate ab`` runs what ``perfgate run B --perf-ab A`` runs: every flag reaches
    pytest as its --perf-ab-* option; a profile found in --profiles-dir goes as its path."""
    import perfgate.cli.ab
    from perfgate.cli.main import main

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "old.toml").write_text("")
    executed: list[list[str]] = []

    def execv(_: str, argv: list[str]) -> None:  # pytest would take over the process here
        executed.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(perfgate.cli.ab.os, "execv", execv)
    with pytest.raises(SystemExit):
        main(
        ["ab", "old", "new.toml", "--profiles-dir", str(tmp_path / "mine"),
         "--tolerance", "0.2", "--min-pairs", "12", "--b-base-url", "http://127.0.0.1:9",
         "--allow-model-change", "--", "-k", "sweep"]
        )  # fmt: skip
    [command] = executed
    assert command[1:6] == ["-m", "pytest", "--pyargs", "perfgate.suites", "-m"]
    assert "--perf-profile=new.toml" in command
    assert f"--perf-ab={tmp_path / 'mine' / 'old.toml'}" in command
    asked = ["--perf-ab-tolerance=0.2", "--perf-ab-min-pairs=12"]
    asked += ["--perf-base-url=http://127.0.0.1:9", "--perf-ab-allow-model-change"]
    assert set(asked) <= set(command), command
    assert command[-2:] == ["-k", "sweep"] and "--" not in command


def _pull(plan) -> list:
    """Every step the plan gives, each 'measured' at once (a stand-in for its LevelData)."""
    steps, done = [], []
    while (step := plan.next(done)) is not None:
        steps.append(step)
        done.append(object())
    return steps


def test_alternating_lifetimes_keep_a_b_b_a_order_and_add_a_pair_a_lifetime():
    """[ab] colocate = false: the plan's sides change once a lifetime (a restart each);
    each lifetime warms each undecided level up once; each level's kept runs still go
    A B B A A B B A, pair k on the same repeat (the same prompts) on both sides."""
    from perfgate.run.plans import ABLifetimesPlan

    seen: list[tuple[int | float, int, int]] = []

    def decide(level, a, b):
        seen.append((level, len(a), len(b)))
        pairs = min(len(a), len(b))
        return "next" if pairs >= (3 if level == 1 else 5) else "repeat"

    plan = ABLifetimesPlan([1, 2], lambda level: 4, decide)
    steps = _pull(plan)
    changes = sum(x.side != y.side for x, y in itertools.pairwise(steps))
    assert plan.lifetimes == changes + 1 == 6  # level 2 decides at 5 pairs: 6 lifetimes
    for level, pairs in ((1, 3), (2, 5)):
        kept = [s for s in steps if s.level == level and not s.discard]
        assert "".join(s.side for s in kept).startswith("ABBAABBA"[: len(kept)])
        assert [s.repeat for s in kept if s.side == "A"][:pairs] == list(range(1, pairs + 1))
        assert [s.repeat for s in kept if s.side == "B"][:pairs] == list(range(1, pairs + 1))
    lifetimes = [[steps[0]]]
    for x, y in itertools.pairwise(steps):
        (lifetimes[-1].append(y) if x.side == y.side else lifetimes.append([y]))
    for life in lifetimes:  # each level it runs: a warm-up first, then 1 or 2 kept runs
        levels = sorted({s.level for s in life})
        assert [s.level for s in life if s.discard] == levels
    assert [s.level for s in lifetimes[4] if not s.discard] == [2, 2]  # level 1 retired
    assert seen[0] == (1, 1, 2)  # the first decision: after A's and B's first lifetimes


def test_alternating_lifetimes_end_when_b_is_far_worse():
    from perfgate.run.plans import ABLifetimesPlan

    plan = ABLifetimesPlan([1, 2], lambda level: 4, lambda level, a, b: "stop")
    _pull(plan)
    assert plan.lifetimes == 2  # the first decision stopped it


def test_single_requests_side_by_side_pair_the_same_prompts_and_catch_4x(tmp_path):
    said: list[str] = []
    a_server, b_server = Recording(), Recording()
    run = ab(tmp_path, a_server, b_server, said, tolerance=0.5)
    a, b = run.measure_single("single", 3)
    assert len(a.levels) == len(b.levels) == 8  # min_pairs, warm-ups left out
    assert a_server.prompts == b_server.prompts  # the same prompts, in the same order
    outcome = run.conclude(plots=False)
    assert outcome.exit_code == 0, outcome.lines
    assert any(c.key.startswith("single.c1.") for c in run.checks), run.checks

    slower = ab(tmp_path / "slower", Recording(), Recording(slow=4.0), said)
    a, b = slower.measure_single("single", 3)
    assert len(b.levels) == 2  # one block: B far worse stops it
    assert slower.conclude(plots=False).exit_code == 1
    assert any(c.key == "single.c1.per_request_tok_s" and c.failed for c in slower.checks)


def test_ab_rounds_and_single_requests_make_the_pairs_runs_shorter(tmp_path):
    """B's [ab] rounds and single_requests set the requests of each A/B run (the same on
    both sides), in place of the workload's."""
    spec = _profile().ab.model_copy(update={"rounds": 1, "single_requests": 2})
    a_server, b_server = Recording(**QUICK), Recording(**QUICK)
    a = _session(tmp_path, a_server, name="a")
    b = _session(tmp_path, b_server, name="b", more={"ab": spec})
    run = ABRun(a, b, ABOptions(tolerance=0.5), progress=lambda _: None)
    sweep_a, sweep_b = run.measure("sweep", lambda level: int(level) * 3, [2])
    assert {len(r.records) for r in sweep_a.levels + sweep_b.levels} == {2}  # 2 in flight x 1
    single_a, single_b = run.measure_single("single", 5)
    assert {len(r.records) for r in single_a.levels + single_b.levels} == {2}
    assert a_server.prompts == b_server.prompts


def test_ab_warmup_sets_the_unmeasured_requests_before_each_pairs_run(tmp_path):
    """B's [ab] warmup replaces the workload's warmup requests (1 here) before each run of
    a pair; each side's discarded warm-up run keeps the workload's. With none, a side's
    server sees its warm-up run's requests and then only measured ones."""
    seen = {}
    for warmup in (None, 0, 2):
        spec = _profile().ab.model_copy(update={"rounds": 1, "warmup": warmup})
        a_server, b_server = Recording(**QUICK), Recording(**QUICK)
        a = _session(tmp_path / f"w{warmup}", a_server, name="a")
        b = _session(tmp_path / f"w{warmup}", b_server, name="b", more={"ab": spec})
        run = ABRun(a, b, ABOptions(tolerance=0.5), progress=lambda _: None)
        sweep_a, sweep_b = run.measure("sweep", levels=[2])
        assert {len(r.records) for r in sweep_a.levels + sweep_b.levels} == {2}
        pairs_runs = len(sweep_a.levels)
        assert pairs_runs >= 8
        per_run = 1 if warmup is None else warmup
        assert len(a_server.prompts) == (1 + 2) + pairs_runs * (per_run + 2), warmup
        assert a_server.prompts == b_server.prompts
        seen[warmup] = len(a_server.prompts)
    assert seen[0] < seen[None] < seen[2], seen


def test_servers_that_do_not_both_fit_stop_the_run_saying_to_alternate(tmp_path, monkeypatch):
    """Both servers started here (not attached), and this host's memory nearly full with
    both up (2% free, under the 5% floor): the run stops before any pair, a usage
    problem (exit 4), saying to alternate; with room to spare it goes on and says what is
    free. (This host's real numbers: tests/unit/test_hardware.py reads /proc/meminfo's
    and nvidia-smi's formats.)"""
    import dataclasses

    from perfgate.launch.hardware import FreeMemory

    said: list[str] = []
    run = ab(tmp_path, MockLlamaServer(), MockLlamaServer(), said)
    for session in (run.a, run.b):  # as if started here: this host's memory holds both
        local = session.profile.model_copy(update={"launcher": "process"})
        session.settings = dataclasses.replace(session.settings, base_url=None, profile=local)
    free = {"mib": 12_000.0}
    monkeypatch.setattr(
        "perfgate.run.ab.free_memory_here",
        lambda: [FreeMemory("host memory", free["mib"], 24_000.0)],
    )
    run.check_fit()  # half free: fits
    assert "perfgate: A and B both up; host memory: 11.7 of 23.4 GiB free" in said
    free["mib"] = 480.0  # 2% free
    with pytest.raises(ReferenceUnavailable, match="A and B do not both fit on this host"):
        run.check_fit()
    assert "host memory: 0.5 of 23.4 GiB free with both up" in run.reference_failed
    assert "set [ab] colocate = false in B's profile (or --alternate)" in run.reference_failed
    outcome = run.conclude(status=1)
    assert outcome.exit_code == 4 and "B was not judged" in outcome.lines[0], outcome


def test_a_twin_check_asked_of_the_run_goes_to_both_sides(tmp_path):
    """The lossless check (a ``twin`` marker) runs as ``[A]`` and ``[B]``: collection
    hands its prompts to A's session too, not B's alone (A's check otherwise failed "no
    twin check was selected when the run began", exit 4, with B unjudged)."""
    from types import SimpleNamespace

    from perfgate.plugin.hooks import pytest_collection_finish
    from perfgate.plugin.state import AB_KEY, SESSION_KEY

    twin = {"correctness": _profile().correctness.model_copy(update={"twin_profile": "twin"})}
    a = _session(tmp_path, MockLlamaServer(), name="a", more=twin)
    b = _session(tmp_path, MockLlamaServer(), name="b", more=twin)
    check = SimpleNamespace(get_closest_marker={
        "twin": pytest.mark.twin(prompts=["Hello"], max_tokens=4).mark,
        "perf": pytest.mark.perf.mark,
        "correctness": pytest.mark.correctness.mark,
    }.get)  # fmt: skip
    stash = {SESSION_KEY: b, AB_KEY: ABRun(a, b)}
    pytest_collection_finish(SimpleNamespace(config=SimpleNamespace(stash=stash), items=[check]))
    assert a.twin_request == b.twin_request == (["Hello"], 4)
