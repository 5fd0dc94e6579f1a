"""The ssh launcher against a real sshd on 127.0.0.1 (Debian's openssh-server, installed by
scripts/install-podman.sh) that the test starts with keys made for it. The "remote" host is
this machine, so the llama-server binary and the model have the same paths there."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from perfgate.engines import get_engine
from perfgate.errors import BackendError, BackendStartError
from perfgate.launch.hardware import describe_local_hardware
from perfgate.launch.process import free_port
from perfgate.launch.ssh import launch_ssh
from perfgate.profile import load_profile_file
from tests.helpers import (
    fake_nvidia_smi,
    floor_baselines,
    interrupt_perf_run,
    launcher_profile,
    owned_server_pids,
    run_pytest,
)
from tests.services.servers import Sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.close()


def ssh_profile(tmp_path, sshd, name="tiny-ssh"):
    return launcher_profile(tmp_path, name, "ssh", sshd.profile_table())


def test_perf_run_on_a_remote_host_as_a_user_runs_it(servers_before, sshd, tmp_path):
    path = ssh_profile(tmp_path, sshd)
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
    assert "(ssh launcher)" in out
    run = json.loads(next((tmp_path / "out" / "runs").glob("*.json")).read_text())
    assert run["status"] == "passed" and run["launcher"] == "ssh"
    assert run["facts"]["threads"]["value"] == 1  # from the remote log
    log = next((tmp_path / "out" / "logs").glob("tiny-ssh-ssh-*.log")).read_text()
    assert "listening on" in log  # the remote log was fetched
    assert not (owned_server_pids() - servers_before)  # the remote process group was stopped


def test_refusing_host_fails_fast(sshd, tmp_path):
    path = ssh_profile(tmp_path, sshd)
    path.write_text(path.read_text().replace(f"port = {sshd.port}", f"port = {free_port()}"))
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"ssh to .* failed") as err:
        launch_ssh(load_profile_file(path), get_engine("llamacpp"), tmp_path)
    assert time.monotonic() - started < 10
    assert "Connection refused" in str(err.value)


def test_bad_flag_exits_at_once_with_exit_code_and_log(servers_before, sshd, tmp_path):
    path = ssh_profile(tmp_path, sshd)
    path.write_text(path.read_text().replace("metrics = true", "no-such-flag = true"))
    backend = launch_ssh(load_profile_file(path), get_engine("llamacpp"), tmp_path)
    started = time.monotonic()
    try:
        with pytest.raises(BackendStartError, match="exited with code") as err:
            backend.wait_ready(60)
    finally:
        backend.stop()
    assert time.monotonic() - started < 5
    assert err.value.exit_code not in (None, 0)
    assert "no-such-flag" in err.value.log_tail
    assert not (owned_server_pids() - servers_before)


def test_readiness_timeout_stops_the_remote_server(servers_before, sshd, tmp_path):
    backend = launch_ssh(
        load_profile_file(ssh_profile(tmp_path, sshd)), get_engine("llamacpp"), tmp_path
    )
    try:
        with pytest.raises(BackendError, match="not ready after 0s"):
            backend.wait_ready(0.01)
    finally:
        backend.stop()
    assert not (owned_server_pids() - servers_before)


def test_ctrl_c_stops_the_remote_server(servers_before, sshd, tmp_path):
    code, out = interrupt_perf_run(ssh_profile(tmp_path, sshd), tmp_path / "out")
    assert code == 2, out
    assert not (owned_server_pids() - servers_before)


def test_hardware_is_probed_on_the_remote_host(servers_before, sshd, tmp_path):
    """A fake nvidia-smi that answers only inside an ssh session to this sshd, on the
    profile's server PATH, with CUDA_VISIBLE_DEVICES=1 in the profile's server env: the key
    is the second fake GPU's, which this machine probed locally does not have."""
    bindir = tmp_path / "remote-bin"
    fake_nvidia_smi(bindir, guard=f'[ "${{SSH_CONNECTION##* }}" = {sshd.port} ]')
    path = ssh_profile(tmp_path, sshd)
    server_path = f"{bindir}:{os.environ['PATH']}"
    env = f'env = {{ PATH = "{server_path}", CUDA_VISIBLE_DEVICES = "1" }}'
    path.write_text(path.read_text().replace("[server]\n", f"[server]\n{env}\n"))
    profile = load_profile_file(path)
    backend = launch_ssh(profile, get_engine("llamacpp"), tmp_path)
    try:
        hw = backend.hardware()
    finally:
        backend.stop()
    assert hw["source"] == f"ssh:{sshd.user}@127.0.0.1", hw
    assert hw["key"] == "1x-nvidia-a100-sxm4-80gb", hw
    assert hw["gpus_on_host"] == 2 and hw["cuda_visible_devices"] == "1"
    assert hw["cpus"] == len(os.sched_getaffinity(0))  # the "remote" host is this one
    local = describe_local_hardware({**os.environ, **profile.server.env})
    assert local["gpus"] == 0 and str(local["gpu_probe"]).startswith("failed (exit 9)")
    assert not (owned_server_pids() - servers_before)


def test_gpu_telemetry_is_read_on_the_remote_host(servers_before, sshd, tmp_path):
    """A perf run through the ssh launcher samples the server's host's GPUs with
    nvidia-smi's loop over the same connection (a fake nvidia-smi that answers only inside
    an ssh session to this sshd, on the profile's server PATH; its lines are written from
    nvidia-smi's documentation): every level run has the remote GPUs' telemetry, the table
    shows it, and no loop is left running."""
    bindir = tmp_path / "remote-bin"
    fake_nvidia_smi(bindir, guard=f'[ "${{SSH_CONNECTION##* }}" = {sshd.port} ]')
    path = ssh_profile(tmp_path, sshd)
    env = f'env = {{ PATH = "{bindir}:{os.environ["PATH"]}" }}'
    path.write_text(path.read_text().replace("[server]\n", f"[server]\n{env}\n"))
    result = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        "-k",
        "sweep",
        f"--perf-profile={path}",
        floor_baselines(path),
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    run = json.loads(next((tmp_path / "out" / "runs").glob("*.json")).read_text())
    assert not [n for n in run["notes"] if "GPU telemetry" in n], run["notes"]
    levels = run["measurements"]["sweep"]["levels"]
    assert levels and all(lv["gpu"] is not None for lv in levels)
    for level in levels:
        h100, a100 = level["gpu"]["gpus"]
        assert h100["name"] == "NVIDIA H100 80GB HBM3" and h100["samples"] >= 1, level["gpu"]
        assert h100["util_mean_pct"] == 37 and h100["power_mean_w"] == 250
        assert a100["power_mean_w"] is None
    assert "GPU util%" in out and "J/tok" in out
    time.sleep(0.5)
    loops = _running_with(str(bindir).encode())
    assert not loops, f"nvidia-smi loops left running: {loops}"
    assert not (owned_server_pids() - servers_before)


def _running_with(marker: bytes) -> list[int]:
    """Pids of processes whose command line holds ``marker`` (read from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
    return found
