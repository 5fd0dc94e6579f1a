"""The docker launcher against a real Docker-API engine: Podman's service (installed by
scripts/install-podman.sh), with a llama-server image built locally (nothing is pulled).

Podman accepts GPU device requests and silently ignores them, which is exactly the case
the launcher's in-container GPU check exists for."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from perfgate.engines import get_engine
from perfgate.errors import BackendError, BackendStartError
from perfgate.launch.docker import OWNER_LABEL, launch_docker
from perfgate.launch.hardware import describe_local_hardware
from perfgate.profile import load_profile_file
from tests.helpers import (
    fake_nvidia_smi,
    floor_baselines,
    interrupt_perf_run,
    launcher_profile,
    run_pytest,
)
from tests.services.servers import LLAMA_IMAGE, PodmanService, build_llama_image


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    service = PodmanService(tmp_path_factory.mktemp("podman"))
    build_llama_image(service.client)
    yield service
    leftovers = service.client.containers.list(all=True, filters={"label": OWNER_LABEL})
    for container in leftovers:
        container.remove(force=True)
    service.close()
    assert not leftovers, f"containers left behind: {[c.name for c in leftovers]}"


def ours(podman):
    return podman.client.containers.list(all=True, filters={"label": OWNER_LABEL})


def docker_profile(tmp_path, url, *, image=LLAMA_IMAGE, extra="", name="tiny-docker"):
    table = f'[docker]\nimage = "{image}"\nhost = "{url}"\napi_version = "1.41"\n{extra}'
    return launcher_profile(tmp_path, name, "docker", table, ["/opt/llama/llama-server"])


def test_perf_run_in_a_container_as_a_user_runs_it(podman, tmp_path):
    path = docker_profile(tmp_path, podman.url)
    text = path.read_text().replace(
        "[server]\n", '[server]\nenv = { HF_TOKEN = "hf_secret_do_not_leak" }\n'
    )
    path.write_text(text)
    result = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={path}",
        floor_baselines(path),
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "(docker launcher)" in out
    run_file = next((tmp_path / "out" / "runs").glob("*.json"))
    run = json.loads(run_file.read_text())
    assert run["status"] == "passed" and run["launcher"] == "docker"
    assert run["facts"]["slots"]["value"] == 4  # read from the container's log
    log = next((tmp_path / "out" / "logs").glob("tiny-docker-docker-*.log")).read_text()
    assert "listening on" in log  # the container's log was kept
    everything = out + run_file.read_text() + log
    assert "hf_secret_do_not_leak" not in everything
    assert ours(podman) == []  # stopped and removed


def test_unreachable_daemon_fails_fast(tmp_path):
    profile = load_profile_file(docker_profile(tmp_path, f"unix://{tmp_path}/nothing.sock"))
    started = time.monotonic()
    with pytest.raises(BackendError, match="docker daemon unreachable at unix://") as err:
        launch_docker(profile, get_engine("llamacpp"), tmp_path)
    assert time.monotonic() - started < 15
    assert "podman system service" in str(err.value)


def test_missing_image_fails_fast_without_pulling(podman, tmp_path):
    image = "localhost/perfgate-test/not-built:never"
    profile = load_profile_file(docker_profile(tmp_path, podman.url, image=image))
    started = time.monotonic()
    with pytest.raises(BackendError, match="is not on the docker daemon") as err:
        launch_docker(profile, get_engine("llamacpp"), tmp_path)
    assert time.monotonic() - started < 10
    assert f"docker pull {image}" in str(err.value)
    assert ours(podman) == []


def test_bad_flag_exits_at_once_with_exit_code_and_log(podman, tmp_path):
    path = docker_profile(tmp_path, podman.url)
    path.write_text(path.read_text().replace("metrics = true", "no-such-flag = true"))
    profile = load_profile_file(path)
    backend = launch_docker(profile, get_engine("llamacpp"), tmp_path)
    started = time.monotonic()
    try:
        with pytest.raises(BackendStartError, match="exited with code") as err:
            backend.wait_ready(60)
    finally:
        backend.stop()
    assert time.monotonic() - started < 5
    assert err.value.exit_code not in (None, 0)
    assert "no-such-flag" in err.value.log_tail
    assert ours(podman) == []


def test_ignored_gpu_request_is_caught_before_ready(podman, tmp_path):
    """Podman takes `--gpus all` and starts the container without any GPU: perfgate must
    not declare it ready (the GPU check runs `nvidia-smi -L` inside; absent here)."""
    profile = load_profile_file(docker_profile(tmp_path, podman.url, extra='gpus = "all"\n'))
    backend = launch_docker(profile, get_engine("llamacpp"), tmp_path)
    try:
        with pytest.raises(BackendError, match="no GPU is visible inside it"):
            backend.wait_ready(60)
    finally:
        backend.stop()
    assert ours(podman) == []


def test_port_in_use_is_refused_before_a_container_starts(podman, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        path = docker_profile(tmp_path, podman.url)
        path.write_text(path.read_text().replace("port = 0", f"port = {port}"))
        with pytest.raises(BackendError, match=f"port {port} on 127.0.0.1 is already in use"):
            launch_docker(load_profile_file(path), get_engine("llamacpp"), tmp_path)
    assert ours(podman) == []


def test_ctrl_c_stops_and_removes_the_container(podman, tmp_path):
    code, out = interrupt_perf_run(docker_profile(tmp_path, podman.url), tmp_path / "out")
    assert code == 2, out
    assert ours(podman) == []


def with_server_env(path, env):
    path.write_text(path.read_text().replace("[server]\n", f"[server]\nenv = {env}\n"))
    return path


def test_hardware_is_probed_inside_the_container(podman, tmp_path):
    """A fake nvidia-smi mounted at a path this machine lacks, answering only inside a
    container, on the profile's server PATH, with a UUID prefix of the second fake GPU in
    CUDA_VISIBLE_DEVICES: the key is that GPU's, which this machine does not have."""
    inside = "/perfgate-fake-gpu/bin"
    assert not Path(inside).exists()
    bindir = tmp_path / "fake-gpu-bin"
    fake_nvidia_smi(bindir, guard="[ -f /run/.containerenv ] || [ -f /.dockerenv ]")
    extra = f'volumes = {{ "{bindir}" = "{inside}" }}\n'
    path = docker_profile(tmp_path, podman.url, extra=extra)
    env = f'{{ PATH = "{inside}:/bin", CUDA_VISIBLE_DEVICES = "GPU-bb22" }}'
    profile = load_profile_file(with_server_env(path, env))
    backend = launch_docker(profile, get_engine("llamacpp"), tmp_path)
    try:
        hw = backend.hardware()
    finally:
        backend.stop()
    assert hw["source"] == f"container:{backend.container.short_id}", hw
    assert hw["key"] == "1x-nvidia-a100-sxm4-80gb", hw
    assert hw["gpus_on_host"] == 2 and hw["cuda_visible_devices"] == "GPU-bb22"
    assert hw["daemon"] == podman.url
    local = describe_local_hardware({**os.environ, **profile.server.env})
    assert "NVIDIA A100-SXM4-80GB" not in local["gpu_names"]
    assert ours(podman) == []


def test_hardware_in_a_container_without_nvidia_smi_is_its_cpus(podman, tmp_path):
    """The test image is busybox and llama-server only: no nvidia-smi there is no GPU."""
    profile = load_profile_file(docker_profile(tmp_path, podman.url))
    backend = launch_docker(profile, get_engine("llamacpp"), tmp_path)
    try:
        hw = backend.hardware()
    finally:
        backend.stop()
    assert hw["source"] == f"container:{backend.container.short_id}", hw
    assert hw["gpu_probe"] == "absent" and hw["gpus"] == 0
    assert hw["cpus"] == len(os.sched_getaffinity(0))  # the container's CPUs are ours
    local = describe_local_hardware()  # the same machine
    assert hw["key"].startswith("cpu-") and hw["key"].endswith(f"-{local['isa']}")
    assert hw["cpu"] == local["cpu"] and hw["machine"] == local["machine"]
    assert ours(podman) == []
