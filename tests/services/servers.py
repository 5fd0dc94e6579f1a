"""Real services the launcher tests start and stop themselves: Podman's Docker-API service,
an sshd on 127.0.0.1, and a local llama-server image (nothing can be pulled here)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from perfgate.engines.llamacpp import llama_server_binary
from perfgate.launch import free_port
from perfgate.launch.process import port_in_use

LLAMA_IMAGE = "localhost/perfgate-test/llama-server:local"


def require(tool: str, env_flag: str, install: str) -> str:
    """The tool's path; skip without it, unless CI demands it (``env_flag`` set)."""
    path = shutil.which(tool) or (tool if Path(tool).exists() else None)
    if path is None:
        message = f"{tool} is not installed: run {install}"
        if os.environ.get(env_flag):
            pytest.fail(f"{env_flag} is set but {message}")
        pytest.skip(message)
    return path


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


class PodmanService:
    """``podman system service`` on a socket of our own, in its own process group."""

    def __init__(self, directory: Path) -> None:
        podman = require("podman", "PERFGATE_REQUIRE_DOCKER", "scripts/install-podman.sh")
        self.url = f"unix://{directory / 'podman.sock'}"
        log = open(directory / "podman-service.log", "wb")  # noqa: SIM115 (kept open)
        self.proc = subprocess.Popen(
            [podman, "system", "service", "--time=0", self.url],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        import docker

        deadline = time.monotonic() + 20
        while True:
            try:
                self.client = docker.DockerClient(base_url=self.url, version="1.41")
                self.client.ping()
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        _stop_group(self.proc)


def build_llama_image(client: object, tag: str = LLAMA_IMAGE) -> str:
    """An image FROM scratch with llama-server, its shared libraries and busybox's sh."""
    import docker

    assert isinstance(client, docker.DockerClient)
    binary = Path(llama_server_binary())
    bindir = binary.parent
    context = Path(tempfile.mkdtemp(prefix="perfgate-image-"))
    ldd = subprocess.run(
        ["ldd", str(binary)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LD_LIBRARY_PATH": str(bindir)},
    ).stdout
    system_libs = {
        word
        for line in ldd.splitlines()
        for word in line.split()
        if word.startswith("/") and not word.startswith(str(bindir))
    }
    with tarfile.open(context / "rootfs.tar", "w") as tar:
        tar.add(bindir, arcname="opt/llama")
        for lib in sorted(system_libs):
            tar.add(os.path.realpath(lib), arcname=lib.lstrip("/"))
        tar.add(shutil.which("busybox") or "/bin/busybox", arcname="bin/busybox")
        for name in ("sh", "cat", "ls"):
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    (context / "Dockerfile").write_text(
        "FROM scratch\nADD rootfs.tar /\nENV LD_LIBRARY_PATH=/opt/llama\n"
    )
    try:
        client.images.build(path=str(context), tag=tag, rm=True)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return tag


class Sshd:
    """A real OpenSSH server on 127.0.0.1 with a host key and a client key made for it."""

    def __init__(self, directory: Path) -> None:
        sshd = require("/usr/sbin/sshd", "PERFGATE_REQUIRE_SSH", "scripts/install-podman.sh")
        keygen = require("ssh-keygen", "PERFGATE_REQUIRE_SSH", "scripts/install-podman.sh")
        self.dir = directory
        for key in ("host_key", "id_ed25519"):
            subprocess.run(
                [keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(directory / key)], check=True
            )
        shutil.copyfile(directory / "id_ed25519.pub", directory / "authorized_keys")
        os.chmod(directory / "authorized_keys", 0o600)
        self.port = free_port()
        config = directory / "sshd_config"
        lane = os.environ.get("PERFGATE_TEST_LANE")  # tests side by side: remote servers carry it
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_key'}\n"
            f"PidFile {directory / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPermitRootLogin prohibit-password\nAllowTcpForwarding yes\n"
            + (f"SetEnv PERFGATE_TEST_LANE={lane}\n" if lane else "")
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
        log = open(directory / "sshd.log", "wb")  # noqa: SIM115 (kept open)
        self.proc = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not port_in_use("127.0.0.1", self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError((directory / "sshd.log").read_text())
            time.sleep(0.1)
        self.user = os.environ.get("USER") or "root"

    def profile_table(self) -> str:
        """The profile's [ssh] table for this server."""
        options = [
            f"UserKnownHostsFile={self.dir / 'known_hosts'}",
            "StrictHostKeyChecking=accept-new",
        ]
        return (
            f'[ssh]\nhost = "{self.user}@127.0.0.1"\nport = {self.port}\n'
            f'identity_file = "{self.dir / "id_ed25519"}"\noptions = {options!r}\n'
            f'workdir = "{self.dir / "remote"}"\n'
        ).replace("'", '"')

    def close(self) -> None:
        _stop_group(self.proc)
