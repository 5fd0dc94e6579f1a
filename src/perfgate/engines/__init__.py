"""Engine modules: everything perfgate knows about one serving engine lives in one file."""

from __future__ import annotations

from perfgate.engines.base import (
    Engine,
    Fact,
    Facts,
    SpecCounters,
    flags_from_args,
    is_secret_name,
    parse_spec_counters,
    resolve_model_path,
)
from perfgate.engines.llamacpp import LlamaCpp
from perfgate.engines.openai import OpenAICompatible
from perfgate.engines.sglang import SGLang
from perfgate.engines.vllm import VLLM
from perfgate.errors import ProfileError

_ENGINES: dict[str, Engine] = {
    "llamacpp": LlamaCpp(),
    "vllm": VLLM(),
    "sglang": SGLang(),
    "openai": OpenAICompatible(),
}


def get_engine(name: str) -> Engine:
    """The engine module for a profile's ``engine`` field."""
    try:
        return _ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(_ENGINES))
        raise ProfileError(f"engine {name!r} is not supported yet (supported: {known})") from None


__all__ = [
    "VLLM",
    "Engine",
    "Fact",
    "Facts",
    "LlamaCpp",
    "OpenAICompatible",
    "SGLang",
    "SpecCounters",
    "flags_from_args",
    "get_engine",
    "is_secret_name",
    "parse_spec_counters",
    "resolve_model_path",
]
