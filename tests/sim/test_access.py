"""A server that wants an API key, as users meet it (`pytest -m perf` attached with
--perf-base-url): the simulator started with an API key answers 401 to any request
without it, and logs each one it refused, so a request path that forgot the key shows.

- no key named in the profile: the run fails at once and says what to set;
- a key named but not exported: a usage error naming the variable, nothing started;
- a wrong key: the run fails, saying the server refused the key sent;
- the right key: a whole recording (single, sweep, request rate) passes, the simulator
  refused nothing, and the key is in no file the run wrote.

The correctness suites need a real model: `tests/e2e/test_access_e2e.py` runs them
against llama-server and vLLM started with --api-key.
"""

from __future__ import annotations

import json
from pathlib import Path

from perfgate.sim import SimConfig, SimProcess
from tests.helpers import run_pytest, sim_profile

KEY = "sk-planted-5a1f0c9e7b"  # planted: it must appear in no file perfgate writes
PROFILE = sim_profile(
    "sim-access",
    """
[server]
{server}

[workload]
input_len = 16
output_len = 8
levels = [2]
rounds = 2
rates = [20]
rate_requests = 4
single_requests = 2
warmup = 1

[gate]
repeats = 1
max_extra_repeats = 0
record_repeats = 3
""",
)


def gate(directory: Path, server: str, sim: SimProcess, env: dict[str, str], *extra: str):
    directory.mkdir(parents=True, exist_ok=True)
    profile = directory / "sim-access.toml"
    profile.write_text(PROFILE.format(server=server))
    return run_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={profile}",
        f"--perf-base-url={sim.base_url}",
        f"--override-ini=perfgate_baselines_dir={directory / 'baselines'}",
        f"--perf-output={directory / 'out'}",
        "--perf-no-plots",
        *extra,
        env=env,
        timeout=300,
    )


def test_an_api_key_from_the_environment_reaches_every_request_and_no_file(tmp_path):
    log = tmp_path / "sim.log"
    with SimProcess(SimConfig(ttft_s=0.01, itl_s=0.002, api_key=KEY), log_path=log) as sim:
        no_key = gate(tmp_path / "none", "", sim, {})
        assert no_key.returncode == 1, no_key.stdout[-3000:]
        assert "it wants an API key" in no_key.stdout
        assert "server.api_key_env" in no_key.stdout

        keyed = 'api_key_env = "SIM_API_KEY"'
        unset = gate(tmp_path / "unset", keyed, sim, {"SIM_API_KEY": ""})
        assert unset.returncode == 4, unset.stdout[-2000:] + unset.stderr[-2000:]
        assert "$SIM_API_KEY, which is not set: export SIM_API_KEY=" in unset.stderr

        wrong = gate(tmp_path / "wrong", keyed, sim, {"SIM_API_KEY": "sk-wrong"})
        assert wrong.returncode == 1, wrong.stdout[-3000:]
        assert "it refused the API key perfgate sent" in wrong.stdout

        refused_before = log.read_text().count("perfgate-sim: refused")
        right = gate(
            tmp_path / "right", keyed, sim, {"SIM_API_KEY": KEY}, "--perf-update-baselines"
        )
        out = right.stdout + right.stderr
        assert right.returncode == 0, out[-4000:]
        assert "perfgate: baseline written to" in out
    refused = log.read_text().splitlines()
    assert [line for line in refused if "perfgate-sim: refused" in line][refused_before:] == []
    # every measurement ran through the key: a run JSON with single, sweep and rate figures
    run = json.loads(next((tmp_path / "right" / "out" / "runs").glob("*.json")).read_text())
    assert {"single", "sweep", "rate"} <= set(run["measurements"]), sorted(run["measurements"])
    written = [p for p in (tmp_path / "right").rglob("*") if p.is_file()]
    assert written and not [p for p in written if KEY.encode() in p.read_bytes()]
    assert KEY not in out
