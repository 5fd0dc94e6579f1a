"""Progress displays: terminal (in place), plain (a few lines), quiet (nothing); and the
tallies a level's workers keep for them, one process or several."""

from __future__ import annotations

import asyncio
import io

from perfgate.load.level import Tally
from perfgate.load.sweep import run_sweep
from perfgate.load.workers import RequestPlan
from perfgate.render.live import ProgressView, duration
from perfgate.sim import SimConfig, SimProcess
from perfgate.workload.prompts import Prompt


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_mode_writes_a_few_lines_for_a_long_step_and_none_for_a_short_one():
    lines, clock = [], FakeClock()
    view = ProgressView(lines.append, "plain", clock=clock, plain_every_s=30)
    with view.step("sweep C=4 run 1 measure", 100) as task:
        for done in range(1, 101):
            clock.now += 1.0  # 100 s in all
            task.update(done, failed=done // 50, detail="≈90 tok/s")
    assert len(lines) == 3, lines  # at 30, 60 and 90 s; the last request ends the step
    assert lines[0] == (
        "perfgate:   sweep C=4 run 1 measure: 30/100 requests, ≈90 tok/s, 30s elapsed, ETA 1m10s"
    )
    assert "1 failed" in lines[1] and "2 failed" not in lines[1]
    short = []
    quick = ProgressView(short.append, "plain", clock=clock)
    with quick.step("prompts", 10, unit="prompts") as task:
        for done in range(1, 11):
            task.update(done)
    assert short == []


def test_terminal_mode_redraws_in_place_and_takes_the_display_off_at_the_end():
    out, clock, screens = io.StringIO(), FakeClock(), []

    class Screen:
        def __enter__(self):
            screens.append("in")

        def __exit__(self, *exc):
            screens.append("out")

    lines = []
    view = ProgressView(lines.append, "terminal", screen=Screen, file=out, width=160, clock=clock)
    with view.step("sweep C=2 run 1 measure", 36) as task:
        for done in range(1, 37):
            clock.now += 0.1
            task.update(done, detail="≈120 tok/s")
    text = out.getvalue()
    assert "sweep C=2 run 1 measure" in text and "≈120 tok/s" in text
    assert "18/36 requests, ≈120 tok/s, 2s elapsed, ETA 2s" in text  # redrawn on the way
    assert "\x1b[" in text  # cursor movement: in place, not one line per update
    assert text.count("/36 requests") <= 36 // 2 + 1  # at most 5 redraws a second
    assert text.endswith("\x1b[2K")  # the display erased at the end (transient)
    assert lines == []  # nothing went to the log
    assert screens and screens.count("in") == screens.count("out")  # always inside screen()


def test_quiet_mode_shows_nothing():
    lines, out = [], io.StringIO()
    view = ProgressView(lines.append, "quiet", file=out)
    view.message("perfgate: starting llama.cpp")
    with view.step("prompts", 3) as task:
        for done in range(1, 4):
            task.update(done)
    assert lines == [] and out.getvalue() == ""


def test_duration():
    assert [duration(s) for s in (0, 42.4, 185, 3725)] == ["0s", "42s", "3m05s", "1h02m"]


def test_tally_counts_failures():
    tally = Tally(4)
    tally.begin("measure", 3)
    for failed in (False, True, False):
        tally.add(failed)
    assert (tally.done, tally.failed, tally.phase, tally.total) == (3, 1, "measure", 3)
    tally.begin("warmup", 2)
    assert (tally.done, tally.failed) == (0, 0)


def _sweep_progress(processes):
    """The tallies a real sweep on the simulator shows, one level at C=8."""
    seen = []

    def on_progress(tally):
        seen.append((tally.concurrency, tally.phase, tally.done, tally.failed, tally.total))

    plan = RequestPlan(api="completions", model="sim", output_len=16, request_timeout_s=30)
    prompts = [Prompt(text=f"p{i}", tokens=None) for i in range(4 + 48)]
    with SimProcess(SimConfig(ttft_s=0.05, itl_s=0.02)) as sim:
        sweep = asyncio.run(
            run_sweep(
                sim.base_url,
                plan,
                [8],
                lambda c, repeat: prompts,
                warmup=4,
                level_timeout_s=60,
                on_progress=on_progress,
                processes=processes,
            )
        )
    assert len(sweep.levels[0].records) == 48
    return seen


def test_a_level_reports_its_progress_while_it_runs():
    seen = _sweep_progress(1)  # 6 waves of 8 requests, ~0.4 s each: a few ticks
    measured = [s for s in seen if s[1] == "measure"]
    assert measured, seen
    assert all(c == 8 and total == 48 and failed == 0 for c, _, _, failed, total in measured)
    done = [s[2] for s in measured]
    assert done == sorted(done) and 0 < done[-1] <= 48


def test_a_level_over_client_processes_reports_their_summed_progress():
    seen = _sweep_progress(2)
    measured = [s for s in seen if s[1] == "measure"]
    assert measured, seen
    done = [s[2] for s in measured]
    assert done == sorted(done) and 0 < done[-1] <= 48
