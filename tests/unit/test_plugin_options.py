"""perfgate's pytest options: all --perf-*, beside plugins that own --base-url and
--profile; the old names get a usage error naming the new ones; the setup options can
come from the project's pytest configuration."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PROFILE = REPO / "profiles" / "llamacpp-gemma3-270m.toml"


def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )


def a_project(tmp_path: Path, ini: str = "") -> Path:
    """A user's directory: one profile, and a pytest configuration."""
    (tmp_path / "profiles").mkdir()
    shutil.copy(DEFAULT_PROFILE, tmp_path / "profiles" / DEFAULT_PROFILE.name)
    (tmp_path / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\n{ini}")
    return tmp_path


def test_perfgate_loads_beside_the_plugins_that_own_base_url_and_profile(tmp_path):
    for plugin in ("pytest_base_url", "pytest_profiling"):
        assert importlib.util.find_spec(plugin), f"{plugin} comes with perfgate[dev]"
    done = pytest_in(a_project(tmp_path), "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    for option in ("--perf-profile", "--perf-base-url", "--perf-server-log"):
        assert option in done.stdout
    assert "--perf-update-baselines" in done.stdout
    # the other plugins' own options are theirs, and work
    assert "--base-url" in done.stdout.replace("--perf-base-url", "")
    assert "--profile-svg" in done.stdout


def test_an_old_option_name_is_refused_with_its_new_name(tmp_path):
    project = a_project(tmp_path)
    for old, new in (
        ("--update-baselines", "--perf-update-baselines"),
        ("--server-log=/var/log/x.log", "--perf-server-log=/var/log/x.log"),
    ):
        done = pytest_in(project, "-m", "perf", old)
        assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"is now {new.split('=')[0]}" in done.stderr
        assert f"write {new}" in done.stderr


def test_setup_options_come_from_the_project_configuration_relative_to_it(tmp_path):
    project = a_project(
        tmp_path,
        'perfgate_base_url = "http://127.0.0.1:9"\nperfgate_server_log = "logs/server.log"\n',
    )
    done = pytest_in(project, "-m", "perf", "--co")
    # the ini's server log is read as the attached server's, relative to pyproject.toml
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{project / 'logs' / 'server.log'}: no such file" in done.stderr
    (project / "logs").mkdir()
    (project / "logs" / "server.log").write_text("main: server is listening\n")
    done = pytest_in(project, "-m", "perf", "--co", "--perf-server-log=elsewhere.log")
    assert "elsewhere.log: no such file" in done.stderr, "the command line wins over the ini"


def test_an_unknown_report_format_is_a_usage_error_before_any_server_starts(tmp_path):
    from tests.helpers import TINY, profile_toml, run_pytest

    tiny = profile_toml(TINY, tmp_path, name="tiny")
    result = run_pytest("-m", "perf", f"--perf-profile={tiny}", "--perf-report=pdf", "suites/perf")
    out = result.stdout + result.stderr
    assert result.returncode == 4, out  # pytest's usage error
    assert (
        "--perf-report: no report format 'pdf' (there are: csv, junit, markdown, plots, text)"
        in out
    )
    assert "starting llamacpp" not in out


def test_side_by_side_options_are_checked_before_any_server_starts(tmp_path):
    project = a_project(tmp_path)
    other = (project / "profiles" / DEFAULT_PROFILE.name).read_text()
    other = other.replace('name = "llamacpp-gemma3-270m"', 'name = "longer"')
    (project / "profiles" / "longer.toml").write_text(
        other.replace("output_len = 64", "output_len = 99")
    )
    for args, says in (
        (["--perf-ab-tolerance=0.2"], "--perf-ab-tolerance needs --perf-ab A"),
        (["--perf-ab=llamacpp-gemma3-270m", "--perf-update-baselines"], "not a baseline"),
        (["--perf-ab=longer"], "workload.output_len: A 99, B 64"),
        (["--perf-ab=llamacpp-gemma3-270m", "--perf-ab-max-pairs=4"], "below min_pairs 8"),
    ):
        done = pytest_in(project, "-m", "perf", *args)
        assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
        assert says in done.stderr, (args, done.stderr[-2000:])
        assert "ready at" not in done.stdout  # refused before anything started
