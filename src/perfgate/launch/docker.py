"""Launch the server in a container through the Docker API (the docker SDK).

Works with Docker and with Podman's Docker-compatible service, local or remote
(``DOCKER_HOST``, including ``ssh://``). The container uses host networking, is labelled
with perfgate's owner id, and is stopped and removed on pass, fail and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import docker
import docker.errors
import requests
from docker.types import DeviceRequest

from perfgate.engines import Engine
from perfgate.errors import BackendError, BackendStartError
from perfgate.launch.base import Clock, Sleep, forget_live, register_live, tail, wait_until_ready
from perfgate.launch.hardware import PROBE_SCRIPT, describe_probe, unknown_hardware
from perfgate.launch.process import ensure_port_free, free_port
from perfgate.profile import DockerSpec, Profile, redact_argv, redact_text

OWNER_LABEL = "perfgate.owner"
CONNECT_TIMEOUT_S = 10


def docker_client(spec: DockerSpec) -> tuple[docker.DockerClient, str]:
    """A connected client and the URL it talks to; a clear error when the daemon is not
    reachable (checked with a ping, within seconds)."""
    url = spec.host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.DockerClient(
            base_url=url,
            version=spec.api_version,
            timeout=CONNECT_TIMEOUT_S,
            use_ssh_client=url.startswith("ssh://"),
        )
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise BackendError(
            f"docker daemon unreachable at {url}: {exc}. Start the daemon (or Podman's "
            "service: `podman system service --time=0 unix:///run/podman/podman.sock`), or "
            "point docker.host / DOCKER_HOST at a running one."
        ) from exc
    return client, url


def _device_requests(gpus: int | str | list[str] | None) -> list[DeviceRequest]:
    if gpus is None:
        return []
    if isinstance(gpus, list):
        return [DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])]
    count = -1 if gpus == "all" else int(gpus)
    return [DeviceRequest(count=count, capabilities=[["gpu"]])]


def _public_host(spec: DockerSpec, url: str, server_host: str) -> str:
    if spec.public_host:
        return spec.public_host
    parsed = urlparse(url)
    if parsed.scheme in ("tcp", "ssh", "http", "https") and parsed.hostname:
        return parsed.hostname
    return server_host


class DockerBackend:
    """A server in a container perfgate started; its logs come from the Docker API."""

    owned = True

    def __init__(
        self,
        profile: Profile,
        engine: Engine,
        *,
        log_dir: Path,
        owner: str = "perfgate",
    ) -> None:
        spec = profile.docker
        if spec is None:
            raise BackendError(f"profile {profile.name} has no [docker] table")
        self.spec = spec
        self.engine = engine
        self.model = profile.model.name
        self.stop_grace_s = profile.timeouts.stop_grace_s
        self.client, self.url = docker_client(spec)
        try:
            self.client.images.get(spec.image)
        except docker.errors.ImageNotFound as exc:
            raise BackendError(
                f"image {spec.image} is not on the docker daemon at {self.url}. perfgate "
                f"never pulls while waiting for readiness: pull or build it first "
                f"(`docker pull {spec.image}`)."
            ) from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise BackendError(f"docker daemon at {self.url}: {exc}") from exc
        host = profile.server.host
        port = profile.server.port or free_port(host)
        ensure_port_free(host, port)
        self.log_path = log_path = log_dir / f"{profile.name}-docker-{port}.log"
        model = engine.prepare_model(profile)
        self.argv = engine.launch_command(profile, host, port, model)
        self.base_url = f"http://{_public_host(spec, self.url, host)}:{port}"
        self.headers: dict[str, str] = {}  # set by launch() from the profile
        volumes = {src: {"bind": dst, "mode": "ro"} for src, dst in spec.volumes.items()}
        if spec.mount_model:  # the same path inside, so the command's path is valid there
            model_dir = str(Path(model).resolve().parent)
            volumes.setdefault(model_dir, {"bind": model_dir, "mode": "ro"})
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._header = f"$ docker run {spec.image} {' '.join(redact_argv(self.argv))}\n"
        log_path.write_text(self._header, encoding="utf-8")
        self._final_logs: str | None = None
        self._hardware: dict[str, object] | None = None
        try:
            self.container = self.client.containers.run(
                spec.image,
                self.argv,
                detach=True,
                name=f"{owner}-{port}",
                network_mode="host",
                ipc_mode="host" if spec.ipc_host else None,
                shm_size=spec.shm_size,
                volumes=volumes,
                environment=dict(profile.server.env),
                labels={OWNER_LABEL: owner, "perfgate.profile": profile.name},
                device_requests=_device_requests(spec.gpus),
                init=True,  # an engine running as PID 1 may ignore SIGTERM
            )
        except docker.errors.DockerException as exc:
            raise BackendStartError(
                f"docker could not start {spec.image}: {redact_text(str(exc))}",
                exit_code=None,
                log_tail="",
            ) from exc
        register_live(self)

    # -- Backend -----------------------------------------------------------------------
    def logs(self) -> str:
        if self._final_logs is not None:
            return self._final_logs
        try:
            raw = self.container.logs(stdout=True, stderr=True)
        except docker.errors.DockerException:
            return self._header
        return self._header + redact_text(raw.decode("utf-8", errors="replace"))

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.logs(), lines)

    def _state(self) -> dict[str, Any]:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return {"Status": "removed"}
        except docker.errors.DockerException:
            return {"Status": "unknown"}
        return dict(self.container.attrs.get("State") or {})

    def alive(self) -> bool:
        return self._state().get("Status") in ("created", "running", "unknown")

    def exit_code(self) -> int | None:
        state = self._state()
        if state.get("Status") in ("created", "running"):
            return None
        code = state.get("ExitCode")
        return int(code) if code is not None else None

    def wait_ready(
        self, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        where = f"container {self.container.name} on {self.url}"
        wait_until_ready(self, self.model, timeout_s, where=where, clock=clock, sleep=sleep)
        if self.spec.gpus is not None:
            self._check_gpus()

    def _check_gpus(self) -> None:
        """GPU requests can be accepted and silently ignored: prove a GPU is visible."""
        try:
            code, output = self.container.exec_run(self.spec.gpu_check)
            text = output.decode("utf-8", errors="replace").strip()
        except docker.errors.DockerException as exc:
            code, text = -1, str(exc)
        if code != 0 or "GPU" not in text:
            raise BackendError(
                f"the container was given a GPU request ({self.spec.gpus}) but no GPU is "
                f"visible inside it: `{' '.join(self.spec.gpu_check)}` exited {code}: "
                f"{text[:300] or '(no output)'}. The daemon at {self.url} accepted the "
                "request without providing GPUs (Podman without CDI, Docker without the "
                "NVIDIA container toolkit)."
            )

    def hardware(self) -> dict[str, object]:
        """The host as the container sees it: the probe runs inside the container (busybox
        is enough; no nvidia-smi there means no GPU), with the container's environment, so
        only the GPUs given to the container, and its CUDA_VISIBLE_DEVICES, count. Call it
        while the container runs."""
        if self._hardware is None:
            self._hardware = self._probe_hardware()
        return copy.deepcopy(self._hardware)

    def _probe_hardware(self) -> dict[str, object]:
        source = f"container:{self.container.short_id}"
        try:
            code, output = self.container.exec_run(["/bin/sh", "-c", PROBE_SCRIPT])
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            why = redact_text(str(exc))[:300]
            return unknown_hardware(source, f"the hardware probe in the container failed: {why}")
        text = output.decode("utf-8", errors="replace")
        if code != 0:
            why = redact_text(text.strip()[-300:])
            return unknown_hardware(
                source, f"the hardware probe in the container exited {code}: {why}"
            )
        desc = describe_probe(text, source)
        desc["daemon"] = self.url
        return desc

    def stop(self) -> None:
        """Stop (SIGTERM, then SIGKILL after the grace period) and remove the container,
        keeping its log in the log file."""
        forget_live(self)
        if self._final_logs is not None:
            return
        final = self.logs()
        with contextlib.suppress(docker.errors.DockerException):
            self.container.stop(timeout=int(self.stop_grace_s))
        with contextlib.suppress(docker.errors.DockerException):
            final = self.logs()
            self.container.remove(force=True)
        self._final_logs = final
        with contextlib.suppress(OSError):
            self.log_path.write_text(final, encoding="utf-8")


def launch_docker(
    profile: Profile, engine: Engine, log_dir: Path, *, owner: str = "perfgate"
) -> DockerBackend:
    """Start the profile's server in a container (not yet waited for: call ``wait_ready``)."""
    return DockerBackend(profile, engine, log_dir=log_dir, owner=owner)
