"""The code check as a user runs it, on the real default model, where no OS isolation
works (``/bin/false`` as the only bwrap)."""

from __future__ import annotations

import json

from tests.helpers import profile_toml, run_pytest, runs_in


def test_code_check_refuses_without_isolation_unless_the_profile_allows_the_guard(
    shared_server, tmp_path, monkeypatch
):
    """``/bin/false`` as the only bwrap stands for a host without user namespaces: the
    default profile's code check fails and says what to do; a profile that allows the
    guard runs the code under it, and the output and the run JSON say so."""
    monkeypatch.setenv("PERFGATE_BWRAP", "/bin/false")
    guard = profile_toml(
        {"code_min_pass = 0.5": 'code_min_pass = 0.5\ncode_sandbox = "allow-guard"'},
        tmp_path,
        name="guarded",
    )
    check = ["suites/correctness/test_answers.py", "-m", "correctness", "-k", "code"]
    url = f"--perf-base-url={shared_server.base_url}"
    refused = run_pytest(*check, url, f"--perf-output={tmp_path / 'a'}")
    guarded = run_pytest(*check, f"--perf-profile={guard}", url, f"--perf-output={tmp_path / 'b'}")
    out = refused.stdout + refused.stderr
    assert refused.returncode == 12, out  # a correctness failure's own exit code
    assert "generated code was not run: no OS isolation here" in out
    assert "code_sandbox = 'allow-guard'" in out
    run = json.loads(runs_in(tmp_path / "a")[-1].read_text())
    assert run["code_sandbox"].startswith("refused: generated code was not run")

    out = guarded.stdout + guarded.stderr
    assert guarded.returncode == 0, out
    assert "perfgate: warning: generated code ran under the audit-hook guard only" in out
    run = json.loads(runs_in(tmp_path / "b")[-1].read_text())
    assert run["code_sandbox"].startswith("audit-hook guard only, NOT OS isolation")
