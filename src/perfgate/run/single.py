"""Sequential single requests at C=1, through pytest-benchmark's rounds or a plain loop."""

from __future__ import annotations

from perfgate.client import RequestRecord
from perfgate.load.level import LevelRun, RoundRunner, plain_rounds
from perfgate.load.workers import SequentialClient
from perfgate.measure.data import LevelData, Measurement
from perfgate.run.state import SessionState
from perfgate.run.window import MeasuredWindow


class SingleRequests(SessionState):
    """The single-request measurement."""

    def measure_single(
        self, name: str, rounds: int, runner: RoundRunner = plain_rounds
    ) -> Measurement:
        """Sequential single requests at C=1, one per round of ``runner`` (pytest-benchmark's
        ``pedantic`` or a plain loop); inconclusive figures get extra rounds."""
        backend = self.start_backend()
        warmup = self.profile.workload.warmup
        plan = self.plan()
        policy = self.policy
        prompts = self.prompts(name, 1, 0, warmup + rounds * policy.max_runs)
        measurement = Measurement()
        self.run.measurements[name] = measurement
        self.progress(f"perfgate: {name}: {rounds} sequential requests a run, {warmup} warmup")
        client = SequentialClient(backend.base_url, plan)
        records: list[RequestRecord] = []
        queue = iter(prompts)
        run_of = {"first": 0, "repeat": 0}

        def send() -> RequestRecord:
            prompt = next(queue)
            return client.send(prompt.text, prompt.output_len, prompt.history)

        def one_round() -> None:
            records.append(send())
            run = records[run_of["first"] :]  # after the record: no figure times a redraw
            label = f"{name} run {run_of['repeat'] + 1}"
            self.view.show(label, rounds, len(run), sum(not r.ok for r in run))

        window = MeasuredWindow(self, backend)

        def start_run(first: int, repeat: int) -> None:
            run_of["first"], run_of["repeat"] = first, repeat
            window.open()

        def close_run(first: int, repeat: int) -> list[LevelData]:
            self.view.close_shown()
            batch = records[first:]
            run = LevelRun(concurrency=1, records=batch, start=batch[0].start, end=batch[-1].end)
            measurement.levels.append(window.close(run, repeat))
            self.save_run()
            return measurement.levels

        try:
            for _ in range(warmup):
                send()
            start_run(0, 0)
            runner(one_round, rounds)  # the first run through pytest-benchmark, if given
            if not records:  # a runner that ran nothing (e.g. benchmarks disabled oddly)
                plain_rounds(one_round, rounds)
            runs = close_run(0, 0)
            again = f"{name} near its limit; {rounds} more requests"
            while self.after_run(name, measurement, runs, "no more runs", again) == "repeat":
                first = len(records)
                start_run(first, len(runs))
                plain_rounds(one_round, rounds)
                runs = close_run(first, len(runs))
        finally:
            self.view.close_shown()
            client.close()
            window.stop()
        return measurement
