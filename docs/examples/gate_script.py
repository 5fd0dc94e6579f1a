"""Gate a server from a script, without pytest: the perf suite's measurements, each judged,
then the end of the run (exit code, run JSON, history, reports), as `pytest -m perf` does.

    python docs/examples/gate_script.py profiles/tiny.toml --base-url http://127.0.0.1:8080
"""

import argparse
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.profile import load_profile
from perfgate.run.session import PerfgateSession


def gate(profile: str, base_url: str | None, baselines: Path, output: Path) -> int:
    """The run's exit code: 0 passed, else perfgate's (1 regressed, 10 too noisy, ...)."""
    root = Path.cwd()
    run = PerfgateSession(
        load_profile(profile, root / "profiles"),
        root=root, baselines_dir=baselines, output_dir=output, base_url=base_url,
    )  # fmt: skip
    run.perf_selected = True  # every baseline figure is judged at the end
    w, failed = run.profile.workload, False
    steps = [
        ("single", lambda: run.measure_single("single", w.single_requests)),
        ("sweep", lambda: run.measure("sweep", w.levels, lambda c: int(c) * w.rounds)),
    ]
    if w.rates:
        rates = [float(r) for r in w.rates]
        steps.append(("rate", lambda: run.measure("rate", rates, lambda _: w.rate_requests)))
    try:
        for name, step in steps:
            try:
                if refused := run.refusal():
                    raise PerfgateError(refused[1])
                step()
                gated = run.gate(name)
            except PerfgateError as exc:
                gated, failed = None, True
                print(f"perfgate: {exc}")
            if gated is not None and gated.failed:
                print(gated.text)
                failed = True
    except KeyboardInterrupt:
        return run.conclude(2).exit_code  # the server stopped, the run JSON kept
    outcome = run.conclude(1 if failed else 0)
    print("\n".join(outcome.lines))
    return outcome.exit_code


if __name__ == "__main__":
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("profile")
    args.add_argument("--base-url")
    args.add_argument("--baselines", type=Path, default=Path("baselines"))
    args.add_argument("--output", type=Path, default=Path(".perfgate"))
    a = args.parse_args()
    raise SystemExit(gate(a.profile, a.base_url, a.baselines, a.output))
