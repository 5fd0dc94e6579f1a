"""A whole profile, read from one TOML file and validated (a clear error names the file
and the field)."""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from perfgate.errors import ProfileError
from perfgate.profile.base import DEFAULT_PROFILE, ArgValue, EngineName, LauncherName, Strict
from perfgate.profile.correctness import CorrectnessSpec
from perfgate.profile.gate import AbSpec, FleetSpec, GateSpec
from perfgate.profile.secrets import ENV_PREFIX, REDACTED, redact_tree
from perfgate.profile.server import DockerSpec, ModelSpec, ServerSpec, SshSpec, Timeouts
from perfgate.profile.workload import CapacitySpec, Slo, WorkloadSpec


class Profile(Strict):
    """One backend configuration: engine, launcher, model, server flags, workload."""

    name: str = Field(description="Profile name; also the baseline file's stem.")
    description: str = Field("", description="One line for `perfgate profiles`.")
    engine: EngineName = Field(description="Which engine module knows this server.")
    launcher: LauncherName = Field("process", description="How the server is started.")
    hardware: str = Field(description="Hardware label the baseline belongs to.")
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    workload: WorkloadSpec
    gate: GateSpec = Field(default_factory=GateSpec)
    ab: AbSpec = Field(
        default_factory=AbSpec,
        description="Side-by-side runs with this profile as B (perfgate ab, --perf-ab).",
    )
    slo: Slo | None = Field(
        None,
        description="Service levels: with them every level reports the share of requests "
        "that met them (slo_met) and goodput tok/s, both gated.",
    )
    capacity: CapacitySpec | None = Field(
        None,
        description="The capacity search under the service levels (needs [slo]): one gated "
        "figure, the highest rate or concurrency whose slo_met stays at or above target.",
    )
    correctness: CorrectnessSpec = Field(default_factory=CorrectnessSpec)
    fleet: FleetSpec = Field(
        default_factory=FleetSpec, description="What a node needs to run this profile's gate."
    )
    docker: DockerSpec | None = Field(None, description="Settings of the docker launcher.")
    ssh: SshSpec | None = Field(None, description="Settings of the ssh launcher.")

    @model_validator(mode="after")
    def _capacity_needs_slo(self) -> Profile:
        if self.capacity is not None and self.slo is None:
            raise ValueError(
                "[capacity] searches for the highest load whose requests meet the service "
                "levels: set them in [slo] (ttft_s, tpot_s and/or latency_s)"
            )
        return self

    @model_validator(mode="after")
    def _launcher_settings(self) -> Profile:
        if self.launcher in ("docker", "ssh") and getattr(self, self.launcher) is None:
            raise ValueError(f"launcher {self.launcher!r} needs a [{self.launcher}] table")
        if self.launcher == "docker" and not self.server.command:
            raise ValueError(
                "launcher 'docker' needs server.command: the engine's program inside the "
                'image (e.g. ["/opt/llama/llama-server"] or ["vllm", "serve"])'
            )
        return self

    def digest(self) -> str:
        """A short stable hash of the profile's content, for provenance."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def public_dump(self) -> dict[str, object]:
        """The profile as JSON data with secret-looking values (env, flags) and every header
        value given literally replaced by ***: what run JSON and baselines keep."""
        dump = redact_tree(self.model_dump(mode="json"))
        assert isinstance(dump, dict)
        server = dump["server"]
        assert isinstance(server, dict)
        server["api_key_env"] = self.server.api_key_env  # a variable's name, not a secret
        server["headers"] = {
            name: value if value.startswith(ENV_PREFIX) else REDACTED
            for name, value in self.server.headers.items()
        }
        return dump

    def request_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers every request to the server carries: the API key from
        ``server.api_key_env`` as a bearer token, and ``server.headers`` with ``env:NAME``
        values read from the environment. An unset variable is an error naming it."""
        environ = os.environ if environ is None else environ

        def read(variable: str, what: str) -> str:
            value = environ.get(variable, "")
            if not value:
                raise ProfileError(
                    f"profile {self.name}: {what} is read from ${variable}, which is not set: "
                    f"export {variable}=... before the run (a CI secret, say)"
                )
            return value

        headers: dict[str, str] = {}
        if self.server.api_key_env:
            key = read(self.server.api_key_env, "the API key (server.api_key_env)")
            headers["Authorization"] = f"Bearer {key}"
        for name, value in self.server.headers.items():
            if value.startswith(ENV_PREFIX):
                value = read(value[len(ENV_PREFIX) :], f"header {name} (server.headers)")
            headers[name] = value
        return headers

    def with_server_args(self, **args: ArgValue) -> Profile:
        """A copy with some server flags replaced (e.g. fewer threads)."""
        merged = {**self.server.args, **args}
        server = self.server.model_copy(update={"args": merged})
        return self.model_copy(update={"server": server})


def _format_validation_error(path: Path, exc: ValidationError) -> str:
    lines = [f"invalid profile {path}:"]
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check spelling; see docs/reference/profile.md)"
        lines.append(f"  - {where}: {msg}")
    return "\n".join(lines)


def load_profile_file(path: Path) -> Profile:
    """Read and validate one profile TOML file."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProfileError(f"profile file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {path} is not valid TOML: {exc}") from exc
    for section in ("server", "model"):  # files that ship next to the profile
        if section in raw:
            raw[section] = _expand(raw[section], "{profile_dir}", str(path.resolve().parent))
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        raise ProfileError(_format_validation_error(path, exc)) from exc


def _expand(value: object, placeholder: str, replacement: str) -> object:
    """``value`` with ``placeholder`` replaced in every string it holds."""
    if isinstance(value, str):
        return value.replace(placeholder, replacement)
    if isinstance(value, list):
        return [_expand(v, placeholder, replacement) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, placeholder, replacement) for k, v in value.items()}
    return value


def available_profiles(profiles_dir: Path) -> list[str]:
    """Names of the profiles in a directory."""
    return sorted(p.stem for p in profiles_dir.glob("*.toml"))


def default_profile(profiles_dir: Path) -> str:
    """The profile a run takes when none is named: the embedded default where the directory
    holds it, else the directory's only profile (several: the default's name, so loading it
    lists them all)."""
    names = available_profiles(profiles_dir)
    if DEFAULT_PROFILE not in names and len(names) == 1:
        return names[0]
    return DEFAULT_PROFILE


def load_profile(name_or_path: str, profiles_dir: Path) -> Profile:
    """Load a profile by name (``profiles_dir/NAME.toml``) or by path to a TOML file."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.is_file():
        return load_profile_file(candidate)
    path = profiles_dir / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(available_profiles(profiles_dir)) or "none"
        raise ProfileError(
            f"unknown profile {name_or_path!r}: no {path}. Known profiles: {known}. "
            "Pass --perf-profile NAME or --perf-profile path/to/profile.toml."
        )
    profile = load_profile_file(path)
    if profile.name != path.stem:
        raise ProfileError(
            f"profile {path}: name = {profile.name!r} must match the file name {path.stem!r}"
        )
    return profile
