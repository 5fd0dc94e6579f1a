"""perfgate as a user installs it (issue #28): the wheel, built from this checkout, in a
fresh venv beside pytest-base-url (which owns --base-url), run from a temporary directory
outside the repository. There `perfgate init --perf-base-url URL` writes the only profile
from what a real llama.cpp server (SmolLM2 Instruct) tells about itself; the user fills in
the lines it marks; `perfgate run` records a baseline there, passes the same server, and
fails it slowed for real: one slot instead of four, so requests at C=4 queue (TTFT about
4x). Baselines, run JSON and the history are written in that directory. The venv has
only perfgate's core dependencies: no extra (docker, pytest-benchmark, hypothesis, plots)
is needed to gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers import ROOT, profile_server, require_smollm2


def sh(*command: str | Path, cwd: Path | None = None, timeout: float = 900) -> str:
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{out[-4000:]}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel of this checkout and pytest-base-url; its bin/."""
    base = tmp_path_factory.mktemp("installed")
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", base / "wheels", ROOT)
    (wheel,) = (base / "wheels").glob("perfgate-*.whl")
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", wheel, "pytest-base-url>=2.1")
    optional = ("docker", "hypothesis", "pytest_benchmark", "pytest_asyncio", "matplotlib")
    found = f"import importlib.util as u; print([m for m in {optional!r} if u.find_spec(m)])"
    assert sh(python, "-c", found).strip() == "[]"  # the gate runs on the core install alone
    return base / "venv" / "bin"


def smollm2_server(tmp_path: Path, **args: object):
    """The shipped SmolLM2 chat profile's real llama-server, its args changed by ``args``."""
    return profile_server("llamacpp-smollm2-chat", tmp_path, **args)


# What the user fills in where perfgate init wrote FILL IN: a short workload for CI, the
# correctness shares calibrated for this 135M model (as the shipped profile has them), and
# a tolerance floor for a shared 2-core host (as the shipped profiles have)
FILLED_IN = {
    "record_repeats = 8  #": "min_tolerance = 0.25\nrecord_repeats = 8  #",
    "input_len = 128": "input_len = 32",
    "output_len = 64": "output_len = 16",
    "levels = [1, 2, 4]": "levels = [1, 4]",
    "rounds = 3": "rounds = 2",
    "single_requests = 5": "single_requests = 3",
    "known_answers_min = 1.0": "known_answers_min = 0.8",
    "code_tasks = true": "code_tasks = false",
}


def test_the_installed_wheel_gates_a_users_own_server_from_their_directory(installed, tmp_path):
    require_smollm2()
    project = tmp_path / "my-service"  # outside the repository: nothing but what is written
    project.mkdir()
    assert not project.resolve().is_relative_to(ROOT)
    fast = {"threads": 1, "threads-batch": 1, "parallel": 4}
    with smollm2_server(tmp_path / "fast", **fast) as backend:
        url = backend.base_url
        out = sh(
            installed / "perfgate", "init", "--perf-base-url", url, "--name", "mine", cwd=project
        )
        assert "perfgate init: wrote profiles/mine.toml: llamacpp" in out, out
        profile = project / "profiles" / "mine.toml"
        text = profile.read_text()
        assert 'engine = "llamacpp"  # from /props' in text
        assert 'api = "chat"' in text and "smollm2-135m-instruct" in text
        assert "levels = [1, 2, 4]  # up to the server's 4 slots" in text
        for told, filled in FILLED_IN.items():
            assert told in text, told
            text = text.replace(told, filled)
        profile.write_text(text)
        assert "mine" in sh(installed / "perfgate", "profiles", cwd=project)

        sh(
            installed / "perfgate",
            "run",
            "--perf-base-url",
            url,
            "--perf-update-baselines",
            cwd=project,
        )
        recorded = list((project / "baselines" / "mine").glob("*.json"))
        assert recorded, list(project.rglob("*"))
        out = sh(installed / "perfgate", "run", "mine", "--perf-base-url", url, cwd=project)
        assert "passed" in out
    runs = sorted((project / ".perfgate" / "runs").glob("mine-*.json"))
    assert len(runs) == 2 and json.loads(runs[-1].read_text())["status"] == "passed"
    assert (project / ".perfgate" / "history" / "mine.jsonl").is_file()

    with smollm2_server(tmp_path / "slow", **{**fast, "parallel": 1}) as backend:
        url = backend.base_url
        slowed = subprocess.run(
            [installed / "perfgate", "run", "mine", "--perf-base-url", url],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    out = slowed.stdout + slowed.stderr
    assert slowed.returncode == 1, out[-6000:]
    assert "FAILED" in out and "test_concurrency_sweep" in out, out[-6000:]
    run = json.loads(sorted((project / ".perfgate" / "runs").glob("mine-*.json"))[-1].read_text())
    assert run["status"] == "failed"
    regressed = {c["key"] for c in run["checks"] if c["verdict"] == "regressed"}
    assert any(key.startswith("sweep.c4.ttft") for key in regressed), regressed
