"""The CI examples a user copies (docs/ci/) and the composite action (action.yml) are
valid for their CI system, by the schemas check-jsonschema ships (SchemaStore's, vendored:
no network), and call perfgate as it is: every --perf-* option they pass is one of
perfgate's, and the command they run is `perfgate run`. (actionlint needs Go or a download
from GitHub, neither of which these machines have.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    REPO / "docs" / "ci" / "github-actions.yml": "vendor.github-workflows",
    REPO / "action.yml": "vendor.github-actions",
    REPO / "docs" / "ci" / "gitlab-ci.yml": "vendor.gitlab-ci",
}


@pytest.mark.parametrize("path", list(EXAMPLES), ids=lambda p: p.name)
def test_a_ci_example_is_valid_for_its_ci_system(path):
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", EXAMPLES[path], path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broken_workflow_is_refused_by_the_same_check(tmp_path):
    schema = EXAMPLES[REPO / "docs" / "ci" / "github-actions.yml"]
    broken = tmp_path / "perf.yml"
    text = (REPO / "docs" / "ci" / "github-actions.yml").read_text()
    broken.write_text(text.replace("runs-on:", "run-on:"))
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout


@pytest.mark.parametrize("path", list(EXAMPLES), ids=lambda p: p.name)
def test_a_ci_example_calls_perfgate_as_it_is(path, pytestconfig):
    text = path.read_text()
    assert "perfgate run" in text
    known = {
        opt
        for group in pytestconfig._parser._groups
        for option in group.options
        for opt in option.names()
    }
    used = set(re.findall(r"--perf-[a-z-]+", text))
    assert used and used <= known, used - known
