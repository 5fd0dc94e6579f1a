"""`perfgate init`'s profile writer: what the server told becomes values with their
sources, what it did not is marked FILL IN, and every profile it writes loads. (Asking
real servers: tests/e2e/test_installed_e2e.py on llama.cpp, and
tests/engines/test_engine_vllm.py on vLLM with an API key.)"""

from __future__ import annotations

import pytest

from perfgate.discover import ServerFacts, _levels, profile_name, profile_toml, write_profile
from perfgate.errors import PerfgateError
from perfgate.profile import load_profile_file


def test_levels_go_up_to_the_servers_slots_in_powers_of_two():
    assert _levels(4) == [1, 2, 4]
    assert _levels(6) == [1, 2, 4, 6]
    assert _levels(1) == [1]
    assert _levels(None) == [1, 2, 4]
    assert _levels(256) == [1, 2, 4, 8, 16, 32, 64]


def test_a_remote_server_of_unknown_kind_gets_a_profile_that_loads_with_its_gaps_marked(
    tmp_path,
):
    facts = ServerFacts(
        base_url="http://gpu-box.example:8000",
        model="/models/Qwen3-8B",
        sources={"model": "/v1/models", "api": "a one-token chat request answered"},
        chat=True,
        unknown=["engine: the server did not say which it is (openai: any server)"],
    )
    assert profile_name(facts) == "openai-qwen3-8b"
    path = write_profile(facts, tmp_path / "profiles", api_key_env="GATEWAY_KEY")
    text = path.read_text()
    assert 'hardware = "FILL-IN"  # FILL IN' in text  # another host: perfgate cannot know
    assert "levels = [1, 2, 4]  # FILL IN" in text
    assert 'engine = "openai"  # from nothing: FILL IN' in text
    profile = load_profile_file(path)
    assert profile.launcher == "attach" and profile.engine == "openai"
    assert profile.server.api_key_env == "GATEWAY_KEY"
    assert profile.workload.api == "chat" and profile.correctness.prompt_style == "chat"
    with pytest.raises(PerfgateError, match="exists: pass --force"):
        write_profile(facts, tmp_path / "profiles")
    write_profile(facts, tmp_path / "profiles", force=True)


def test_a_server_without_a_chat_template_gets_completions():
    facts = ServerFacts(base_url="http://127.0.0.1:8080", engine="llamacpp", model="base")
    facts.sources.update(model="/v1/models", engine="/props", api="refused")
    facts.slots, facts.sources["slots"] = 2, "/props total_slots"
    text = profile_toml(facts, "base")
    assert 'api = "completions"' in text
    assert 'prompt_style = "completion"  # FILL IN' in text
    assert "levels = [1, 2]  # up to the server's 2 slots" in text
