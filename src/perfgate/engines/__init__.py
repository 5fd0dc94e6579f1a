"""Engine modules: everything perfgate knows about one serving engine lives in one file."""

from __future__ import annotations

import importlib
import pkgutil

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


def _discovered() -> dict[str, Engine]:
    """Every engine module of this package: one that defines ``ENGINE`` (an instance of
    its :class:`~perfgate.engines.base.Engine`), by its ``name``. A new engine is one new
    file here."""
    found: dict[str, Engine] = {}
    for module in pkgutil.iter_modules(__path__):
        engine = getattr(importlib.import_module(f"{__name__}.{module.name}"), "ENGINE", None)
        if isinstance(engine, Engine):
            found[engine.name] = engine
    return dict(sorted(found.items()))


_ENGINES = _discovered()


def engine_names() -> list[str]:
    """The engines a profile may name (``engine = "..."``)."""
    return list(_ENGINES)


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
    "engine_names",
    "flags_from_args",
    "get_engine",
    "is_secret_name",
    "parse_spec_counters",
    "resolve_model_path",
]
