"""Engine modules: everything perfgate knows about one serving engine lives in one file."""

from __future__ import annotations

from perfgate.engines.argv import flags_from_args
from perfgate.engines.base import Engine
from perfgate.engines.identify import Identified, ServerProbe
from perfgate.engines.llamacpp import LlamaCpp
from perfgate.engines.openai import OpenAICompatible
from perfgate.engines.prometheus import SpecStats, parse_spec_counters
from perfgate.engines.sglang import SGLang
from perfgate.engines.vllm import VLLM
from perfgate.engines.weights import resolve_model_path
from perfgate.errors import ProfileError
from perfgate.facts import Fact, Facts
from perfgate.profile import is_secret_name
from perfgate.registry import Registry, UnknownName

ENGINES: Registry[Engine] = Registry("engine", package=__name__)


def _register_engine_modules() -> None:
    """Every engine module of this package: one that defines ``ENGINE`` (an instance of
    its :class:`~perfgate.engines.base.Engine`), by its ``name``, in name order. A new
    engine is one new file here."""
    found: dict[str, Engine] = {}
    for module in ENGINES.discover():
        engine = getattr(module, "ENGINE", None)
        if isinstance(engine, Engine):
            found[engine.name] = engine
    for name in sorted(found):
        ENGINES.register(name, found[name])


_register_engine_modules()


def engine_names() -> list[str]:
    """The engines a profile may name (``engine = "..."``)."""
    return list(ENGINES)


def get_engine(name: str) -> Engine:
    """The engine module for a profile's ``engine`` field."""
    try:
        return ENGINES[name]
    except UnknownName as exc:
        known = ", ".join(exc.known)
        raise ProfileError(f"engine {name!r} is not supported yet (supported: {known})") from None


__all__ = [
    "ENGINES",
    "VLLM",
    "Engine",
    "Fact",
    "Facts",
    "Identified",
    "LlamaCpp",
    "OpenAICompatible",
    "SGLang",
    "ServerProbe",
    "SpecStats",
    "engine_names",
    "flags_from_args",
    "get_engine",
    "is_secret_name",
    "parse_spec_counters",
    "resolve_model_path",
]
