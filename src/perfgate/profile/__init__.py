"""Profiles: what backend to start (or attach to), how, and what workload to run on it.

A profile is one TOML file under ``profiles/``, validated with pydantic: an unknown
field, a wrong type or a malformed file raises :class:`~perfgate.errors.ProfileError`
naming the file and the field. One module per table kind:

- :mod:`.server`: the model, server flags, timeouts, docker and ssh settings;
- :mod:`.workload`: the workload, service levels, capacity search;
- :mod:`.correctness`: the answer checks;
- :mod:`.gate`: the verdict settings and fleet needs;
- :mod:`.secrets`: redaction of secrets;
- :mod:`.load`: the whole profile, read from its file.
"""

from perfgate.profile.base import DEFAULT_PROFILE, ArgValue, EngineName, LauncherName, Strict
from perfgate.profile.correctness import CorrectnessSpec, DegeneracyLimits
from perfgate.profile.gate import AbSpec, FleetSpec, GateSpec
from perfgate.profile.load import (
    Profile,
    available_profiles,
    default_profile,
    load_profile,
    load_profile_file,
)
from perfgate.profile.secrets import (
    ENV_PREFIX,
    REDACTED,
    SECRET_NAME,
    is_secret_name,
    redact_argv,
    redact_text,
    redact_tree,
)
from perfgate.profile.server import DockerSpec, ModelSpec, ServerSpec, SshSpec, Timeouts
from perfgate.profile.workload import PRESETS, CapacitySpec, Slo, WorkloadSpec

__all__ = [
    "DEFAULT_PROFILE",
    "ENV_PREFIX",
    "PRESETS",
    "REDACTED",
    "SECRET_NAME",
    "AbSpec",
    "ArgValue",
    "CapacitySpec",
    "CorrectnessSpec",
    "DegeneracyLimits",
    "DockerSpec",
    "EngineName",
    "FleetSpec",
    "GateSpec",
    "LauncherName",
    "ModelSpec",
    "Profile",
    "ServerSpec",
    "Slo",
    "SshSpec",
    "Strict",
    "Timeouts",
    "WorkloadSpec",
    "available_profiles",
    "default_profile",
    "is_secret_name",
    "load_profile",
    "load_profile_file",
    "redact_argv",
    "redact_text",
    "redact_tree",
]
