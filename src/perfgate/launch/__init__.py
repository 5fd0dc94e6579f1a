"""Launchers: each returns a ``Backend`` handle (base_url, logs, alive, wait_ready, stop)."""

from pathlib import Path

from perfgate.engines import Engine
from perfgate.errors import BackendError
from perfgate.launch.attach import AttachedBackend
from perfgate.launch.base import Backend
from perfgate.launch.hardware import describe_local_hardware, hardware_key
from perfgate.launch.process import ProcessBackend, free_port, launch_process
from perfgate.profile import Profile


def launch(profile: Profile, engine: Engine, log_dir: Path, *, owner: str) -> Backend:
    """Start the profile's server with its launcher (not yet waited for); requests to it
    carry the profile's API key and headers."""
    headers = profile.request_headers()  # before starting: a missing key stops nothing
    backend: Backend
    if profile.launcher == "process":
        backend = launch_process(profile, engine, log_dir, owner=owner)
    elif profile.launcher == "docker":
        try:
            from perfgate.launch.docker import launch_docker  # the docker SDK loads only here
        except ImportError as exc:
            raise BackendError(
                f"profile {profile.name} starts its server with docker, which needs the "
                f"docker SDK ({exc.name} is not installed): pip install 'perfgate[docker]'"
            ) from exc

        backend = launch_docker(profile, engine, log_dir, owner=owner)
    elif profile.launcher == "ssh":
        from perfgate.launch.ssh import launch_ssh

        backend = launch_ssh(profile, engine, log_dir, owner=owner)
    else:
        raise BackendError(
            f"profile {profile.name} attaches to a running server: pass --perf-base-url URL"
        )
    backend.headers = headers
    return backend


__all__ = [
    "AttachedBackend",
    "Backend",
    "ProcessBackend",
    "describe_local_hardware",
    "free_port",
    "hardware_key",
    "launch",
    "launch_process",
]
