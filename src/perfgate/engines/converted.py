"""What engines that serve Hugging Face directories share: the Python of an engine kept in
its own virtual environment, and a GGUF converted once into a Hugging Face directory with
that Python (``hf_from_gguf.py``, cached)."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from perfgate.engines.weights import resolve_model_path
from perfgate.errors import EngineUnavailable
from perfgate.profile import Profile

CONVERTER = Path(__file__).with_name("hf_from_gguf.py")
CONVERT_TIMEOUT_S = 900


def engine_python(module: str, env: str, local_venv: Path, install: str) -> str:
    """The Python that has ``module``: $``env``, else this interpreter when the module is
    importable here, else ``local_venv`` (where ``install`` puts it)."""
    if chosen := os.environ.get(env):
        if not Path(chosen).exists():
            raise EngineUnavailable(f"{env}={chosen}: no such interpreter")
        return chosen
    if importlib.util.find_spec(module) is not None:
        return sys.executable
    if local_venv.exists():
        return str(local_venv.absolute())
    raise EngineUnavailable(
        f"{module} is not installed: run {install} (creates {local_venv.parent.parent}), or "
        f"set {env} to a Python that has {module}"
    )


def hf_cache_dir() -> Path:
    """Where converted models are kept ($PERFGATE_CACHE or ~/.cache/perfgate)."""
    base = os.environ.get("PERFGATE_CACHE") or Path.home() / ".cache" / "perfgate"
    return Path(base) / "hf"


def hf_model_dir(gguf: Path, python: str) -> Path:
    """A Hugging Face directory converted from ``gguf`` (converted once, then cached under
    a key of the file's size and mtime and the converter's content)."""
    stat = gguf.stat()
    key = hashlib.sha256(
        f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode() + CONVERTER.read_bytes()
    ).hexdigest()[:12]
    out = hf_cache_dir() / f"{gguf.stem}-{key}"
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # one conversion at a time: two runs on one host (vLLM and SGLang of one model) would
    # write the same directory; the second waits, then finds it done
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "config.json").exists():
            run_converter(gguf, out, python)
    return out


def run_converter(gguf: Path, out: Path, python: str) -> None:
    """Write ``out`` from ``gguf`` with the converter, run by ``python``."""
    print(f"perfgate: converting {gguf.name} to a Hugging Face directory (once)")
    try:
        done = subprocess.run(
            [python, str(CONVERTER), str(gguf), str(out)],
            capture_output=True,
            text=True,
            timeout=CONVERT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EngineUnavailable(
            f"converting {gguf} took over {CONVERT_TIMEOUT_S}s; gave up"
        ) from exc
    if done.returncode != 0 or not (out / "config.json").exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise EngineUnavailable(
            f"could not convert {gguf} to a Hugging Face directory with {python} "
            f"(exit {done.returncode}); it needs transformers, torch and gguf:\n{tail}"
        )


def served_model(profile: Profile, default_python: Callable[[], str]) -> str:
    """The weights' path a profile's server loads: a GGUF converted to a Hugging Face
    directory (once, cached) when the profile says ``hf_from_gguf``, with the Python of its
    ``server.command`` where that is one, else ``default_python()``."""
    model = resolve_model_path(profile.model)
    if not profile.model.hf_from_gguf:
        return model
    program = profile.server.command
    python = program[0] if program and "python" in Path(program[0]).name else default_python()
    return str(hf_model_dir(Path(model), python))
