"""`perfgate init`'s profile writer: what the server told becomes values with their
sources, what it did not is marked FILL IN, and every profile it writes loads. (Asking
real servers: tests/e2e/test_installed_e2e.py on llama.cpp, and
tests/engines/test_engine_vllm.py on vLLM with an API key.)"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import pytest

from perfgate.discover import (
    ServerFacts,
    _levels,
    probe_server,
    profile_name,
    profile_toml,
    write_profile,
)
from perfgate.engines import ENGINES, Engine, Identified, ServerProbe
from perfgate.errors import PerfgateError
from perfgate.profile import load_profile_file

REMOTE = "http://192.0.2.10:8000"  # TEST-NET-1: never this machine, never resolved


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


def fake_server(pages: dict[str, Any], seen: list[str] | None = None) -> httpx.MockTransport:
    """A server answering GET ``path`` with ``pages[path]`` (a dict as JSON, a str as
    text, an int as that status), 404 elsewhere; a one-token chat request is answered.
    ``seen`` collects the paths asked."""

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if seen is not None:
            seen.append(f"{request.method} {path}")
        if request.method == "POST" and path == "/v1/chat/completions":
            return httpx.Response(200, json={"choices": [{"message": {"content": "Hi"}}]})
        page = pages.get(path) if request.method == "GET" else None
        if isinstance(page, int):
            return httpx.Response(page)
        if isinstance(page, dict):
            return httpx.Response(200, content=json.dumps(page).encode())
        if isinstance(page, str):
            return httpx.Response(200, text=page)
        return httpx.Response(404)

    return httpx.MockTransport(answer)


def models(**fields: Any) -> dict[str, Any]:
    return {"data": [{"id": "m", **fields}]}


@pytest.mark.parametrize(
    ("pages", "engine", "told"),
    [
        (
            {
                "/v1/models": models(meta={"n_ctx": 4096}),
                "/props": {"build_info": "b1-abc", "total_slots": 4},
                "/metrics": "llamacpp:requests_processing 0\n",
            },
            "llamacpp",
            {"engine": "/props", "slots": "/props total_slots", "context": "/v1/models meta.n_ctx"},
        ),
        (
            {"/v1/models": models(), "/metrics": "llamacpp:requests_processing 0\n"},
            "llamacpp",
            {"engine": "/metrics (llamacpp:*)"},
        ),
        (
            {
                "/v1/models": models(max_model_len=2048),
                "/metrics": "vllm:num_requests_running 0\n",
                "/server_info": {"vllm_config": "..."},  # a certain claim beats a suggestion
                "/version": {"version": "0.32.0"},
            },
            "vllm",
            {"engine": "/metrics (vllm:*)", "context": "/v1/models max_model_len"},
        ),
        (
            {"/v1/models": models(), "/get_server_info": {"version": "0.5.23"}},
            "sglang",
            {"engine": "/server_info"},
        ),
        (
            {"/v1/models": models(), "/metrics": "sglang:num_running_reqs 0\n"},
            "sglang",
            {"engine": "/metrics (sglang:*)"},
        ),
        ({"/v1/models": models(), "/metrics": "up 1\n"}, "openai", {}),
    ],
    ids=["llamacpp-props", "llamacpp-metrics", "vllm", "sglang-info", "sglang-metrics", "any"],
)
def test_each_engine_recognises_its_own_server(pages, engine, told):
    facts = probe_server(REMOTE, transport=fake_server(pages))
    assert facts.engine == engine
    assert {k: v for k, v in facts.sources.items() if k in ("engine", "slots", "context")} == told
    assert facts.metrics == ("/metrics" in pages)
    assert facts.chat and facts.model == "m"
    if engine == "llamacpp" and "/props" in pages:
        assert (facts.slots, facts.context) == (4, 4096)
        assert facts.version == "b1-abc" and facts.sources["version"] == "/props build_info"
    if engine == "vllm":
        assert (facts.slots, facts.context) == (None, 2048)
        assert facts.version == "0.32.0" and facts.sources["version"] == "/version"
    if engine == "openai":
        assert facts.unknown[0].startswith("engine: the server did not say")


def test_each_page_is_asked_once_and_an_api_key_wall_is_named():
    seen: list[str] = []
    probe_server(REMOTE, transport=fake_server({"/v1/models": models()}, seen))
    gets = [s for s in seen if s.startswith("GET")]
    assert len(gets) == len(set(gets)), gets  # /metrics read by three engines, asked once
    with pytest.raises(PerfgateError, match="answered 401 to GET /props: it wants an API key"):
        probe_server(REMOTE, transport=fake_server({"/v1/models": models(), "/props": 401}))


@dataclass(frozen=True)
class Tgi(Engine):
    """An engine perfgate has never heard of, whole in this class (a new engines/tgi.py)."""

    name: str = "tgi"
    title: ClassVar[str | None] = "TGI"
    version_source: ClassVar[str] = "/info version"

    def identify(self, probe: ServerProbe) -> Identified | None:
        info = probe.json("/info")
        if info is None or "max_concurrent_requests" not in info:
            return None
        return Identified(
            "/info",
            slots=info["max_concurrent_requests"],
            context=info.get("max_input_tokens"),
            sources={
                "slots": "/info max_concurrent_requests",
                "context": "/info max_input_tokens",
            },
        )

    def version(self, client: httpx.Client) -> str:
        return str(client.get("/info").json()["version"])


TGI_PAGES = {
    "/v1/models": models(),
    "/info": {"version": "3.1.0", "max_concurrent_requests": 8, "max_input_tokens": 4096},
    "/metrics": "tgi_request_count 3\n",
}


def test_a_new_engine_registered_is_recognised_by_init_with_no_other_change(monkeypatch, tmp_path):
    assert probe_server(REMOTE, transport=fake_server(TGI_PAGES)).engine == "openai"  # none yet

    monkeypatch.setitem(ENGINES, "tgi", Tgi())  # what engines/tgi.py's ENGINE would do
    facts = probe_server(REMOTE, transport=fake_server(TGI_PAGES))
    assert facts.engine == "tgi" and facts.sources["engine"] == "/info"
    assert (facts.slots, facts.context) == (8, 4096)
    assert facts.version == "3.1.0" and facts.sources["version"] == "/info version"
    assert not any(item.startswith("engine:") for item in facts.unknown)
    path = write_profile(facts, tmp_path / "profiles")
    assert path.name == "tgi-m.toml"
    text = path.read_text()
    assert 'description = "TGI 3.1.0, m, attached"' in text
    assert 'engine = "tgi"  # from /info' in text
    assert (
        "levels = [1, 2, 4, 8]  # up to the server's 8 slots (/info max_concurrent_requests)"
        in text
    )
    assert load_profile_file(path).engine == "tgi"
