"""Bad output fails its request: short outputs under ignore_eos, unexpected finish reasons;
attached runs send prompts no earlier run sent."""

from perfgate.client import RequestRecord
from perfgate.load.workers import RequestPlan
from perfgate.profile import DEFAULT_PROFILE, load_profile
from perfgate.run.session import PerfgateSession
from tests.helpers import ROOT


def record(tokens, finish="length"):
    return RequestRecord(index=0, start=0, end=1, completion_tokens=tokens, finish_reason=finish)


def test_short_output_with_ignore_eos_and_abort_fail_the_request():
    forced = RequestPlan("completions", "m", 64, 10, extras={"ignore_eos": True})
    assert forced.checked(record(64)).ok
    short = forced.checked(record(40, "stop"))
    assert not short.ok and short.error.startswith("short output: 40 of 64 tokens")
    aborted = forced.checked(record(64, "abort"))
    assert not aborted.ok and "finish_reason 'abort'" in aborted.error
    unforced = RequestPlan("completions", "m", 64, 10)  # the server rejected ignore_eos
    assert unforced.checked(record(40, "stop")).ok


def test_attach_mode_prompts_carry_a_per_run_nonce(tmp_path):
    profile = load_profile(DEFAULT_PROFILE, ROOT / "profiles")

    def session(url):
        return PerfgateSession(
            profile, root=ROOT, baselines_dir=tmp_path, output_dir=tmp_path, base_url=url
        )

    launched = [session(None).prompt_source, session(None).prompt_source]
    attached = [session("http://127.0.0.1:9").prompt_source for _ in range(2)]
    assert launched[0].nonce == launched[1].nonce == ""  # a fresh server: seeded, repeatable
    assert attached[0].nonce and attached[0].nonce != attached[1].nonce


def test_a_remote_attached_server_is_keyed_by_label_and_says_how_to_name_it(tmp_path):
    profile = load_profile(DEFAULT_PROFILE, ROOT / "profiles")
    session = PerfgateSession(
        profile, root=ROOT, baselines_dir=ROOT / "baselines", output_dir=tmp_path,
        base_url="http://gpu-host.example:8000",
    )  # fmt: skip
    session.resolve_baseline({"key": "", "source": "remote", "host": "gpu-host.example"})
    assert session.hardware_key == "cpu-2core" and session.baseline_tier == "any"
    assert "--perf-hardware KEY" in session.tier_note()
    assert "--perf-base-url http://gpu-host.example:8000" in session.tier_note()
