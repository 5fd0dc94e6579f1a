"""A real llama-server started with --api-key, attached as users do (`pytest -m perf
--perf-base-url URL`): without the key the run fails at once and says what to set; with
the key from the environment (the profile's server.api_key_env) the correctness suite and
the perf run pass, and the key is in no file the run wrote, nor in its output.
(vLLM's --api-key: tests/engines/test_engine_vllm.py::test_vllm_profile_end_to_end.)"""

from __future__ import annotations

import json

from tests.helpers import ROOT, TINY, floor_baselines, profile_toml, run_pytest, runs_in

KEY = "sk-planted-llama-3e9d71"  # planted: it must appear in no file the run writes


def keyed_server(tmp_path, monkeypatch):
    """The default profile's real llama-server, started with --api-key KEY."""
    from perfgate.profile import DEFAULT_PROFILE, load_profile
    from perfgate.run.session import PerfgateSession

    monkeypatch.setenv("LLAMA_API_KEY", KEY)
    profile = load_profile(DEFAULT_PROFILE, ROOT / "profiles")
    server = profile.server.model_copy(
        update={"args": {**profile.server.args, "api-key": KEY}, "api_key_env": "LLAMA_API_KEY"}
    )
    return PerfgateSession(
        profile.model_copy(update={"server": server}),
        root=ROOT,
        baselines_dir=tmp_path / "none",
        output_dir=tmp_path / "own",
        progress=lambda _: None,
    )


def attached_perf_run(profile, base_url, output):
    """`pytest -m perf` attached to ``base_url``, gated by a floor written for ``profile``."""
    return run_pytest(
        "-m",
        "perf",
        f"--perf-profile={profile}",
        f"--perf-base-url={base_url}",
        floor_baselines(profile),
        f"--perf-output={output}",
    )


def test_llama_server_with_an_api_key_is_refused_without_it_and_gated_with_it(
    tmp_path, monkeypatch
):
    owner = keyed_server(tmp_path, monkeypatch)
    try:
        backend = owner.start_backend()  # its readiness probe already needs the key
        bare = profile_toml(TINY, tmp_path, name="tiny")
        refused = attached_perf_run(bare, backend.base_url, tmp_path / "refused")
        out = refused.stdout + refused.stderr
        assert refused.returncode == 1, out[-4000:]
        assert "answered 401" in out and "it wants an API key" in out, out[-4000:]
        assert 'server.api_key_env = "VLLM_API_KEY"' in out

        keyed = profile_toml(
            {**TINY, "[server]\n": '[server]\napi_key_env = "LLAMA_API_KEY"\n'},
            tmp_path,
            name="tiny-keyed",
        )
        passed = attached_perf_run(keyed, backend.base_url, tmp_path / "out")
        out = passed.stdout + passed.stderr
        assert passed.returncode == 0, out[-6000:]
        assert backend.alive()
    finally:
        owner.stop_backend()
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["status"] == "passed" and set(run["measurements"]) >= {"single", "sweep"}
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert [p for p in written if KEY.encode() in p.read_bytes()] == []
    assert KEY not in out
