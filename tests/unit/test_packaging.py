"""perfgate outside its repository: the wheel names every package (the suites and their
fixtures included), `perfgate run` is pytest on the installed suites from the user's
directory, a directory with one profile takes it without naming it, and the suites
collected where perfgate is not configured are refused with what to do.
(The wheel itself, installed in a fresh venv and gating a real server:
tests/e2e/test_installed_e2e.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from perfgate.cli import main, run_command
from perfgate.errors import ProfileError
from perfgate.profile import DEFAULT_PROFILE, default_profile, load_profile

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "llamacpp-smollm2-chat.toml"


def test_the_wheel_lists_every_package_of_the_source_tree():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {"perfgate": REPO / "src" / "perfgate"}
    roots.update({name: REPO / path for name, path in config["package-dir"].items() if name})
    found = set()
    for package, root in roots.items():
        for init in root.rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            if "data" not in parts and "__pycache__" not in parts:
                found.add(".".join((package, *parts)))
    assert found == listed
    assert {"perfgate.suites.perf", "perfgate.suites.correctness", "perfgate.fixtures"} <= listed
    data = config["package-data"]["perfgate.suites.correctness"]
    assert any((REPO / "suites" / "correctness").glob(data[0])), data


def test_perfgate_run_is_pytest_on_the_installed_suites_from_here(tmp_path):
    (tmp_path / "profiles").mkdir()
    command = run_command(["mine", "--perf-base-url", "http://127.0.0.1:8000"], tmp_path)
    assert command[:7] == [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "perfgate.suites",
        "-m",
        "perf",
    ]
    assert "--perf-profile=mine" in command
    assert f"--rootdir={tmp_path}" in command  # this directory's profiles/, not a parent's
    assert command[-2:] == ["--perf-base-url", "http://127.0.0.1:8000"]
    # no profile named: the directory's own choice; a rootdir given is kept
    bare = run_command(["--rootdir=/elsewhere", "-x"], tmp_path)
    assert not any(a.startswith("--perf-profile") for a in bare)
    assert [a for a in bare if a.startswith("--rootdir")] == ["--rootdir=/elsewhere"]
    assert run_command([], tmp_path / "none")[-1] == "perf"  # no profiles/: no rootdir


def test_perfgate_run_help_names_the_pytest_command_and_the_exit_codes(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "pytest --pyargs perfgate.suites -m perf --perf-profile PROFILE" in out
    assert "10 too noisy" in out and "12 a correctness check failed" in out


def test_a_directory_with_one_profile_takes_it_and_with_several_asks(tmp_path):
    (tmp_path / "mine.toml").write_text(
        PROFILE.read_text().replace("llamacpp-smollm2-chat", "mine")
    )
    assert default_profile(tmp_path) == "mine"
    assert load_profile(default_profile(tmp_path), tmp_path).name == "mine"
    (tmp_path / "other.toml").write_text("")
    assert default_profile(tmp_path) == DEFAULT_PROFILE
    with pytest.raises(ProfileError, match="Known profiles: mine, other"):
        load_profile(default_profile(tmp_path), tmp_path)
    assert default_profile(REPO / "profiles") == DEFAULT_PROFILE  # the repository's own


def suites_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            "perfgate.suites",
            "-m",
            "perf",
            "--co",
            "-q",
            *args,
        ],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_installed_suites_collect_from_a_directory_holding_only_a_profile(tmp_path):
    (tmp_path / "profiles").mkdir()
    shutil.copy(PROFILE, tmp_path / "profiles" / PROFILE.name)
    done = suites_in(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_perf.py::test_concurrency_sweep" in done.stdout
    assert "test_smoke.py::test_known_answer" in done.stdout  # correctness runs first
    assert done.stdout.index("test_smoke.py") < done.stdout.index("test_perf.py")


def test_the_suites_where_perfgate_is_not_configured_are_refused_with_what_to_do(tmp_path):
    done = suites_in(tmp_path)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    assert "perfgate is not configured here: no profiles/ directory" in done.stderr
    assert "perfgate init --perf-base-url URL" in done.stderr
