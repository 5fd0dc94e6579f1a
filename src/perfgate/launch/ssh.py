"""Launch the server on a remote host over ssh; reach it through a local port forward.

The remote command runs under ``setsid`` so it leads its own process group; perfgate
stops that group (SIGTERM, then SIGKILL) remotely. One multiplexed ssh connection
(ControlMaster) carries the start, the liveness checks, log fetches and the stop.
``server.command`` and ``model.path`` are paths on the remote host.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from perfgate.engines import Engine
from perfgate.errors import BackendError, BackendStartError
from perfgate.launch.base import Clock, Sleep, forget_live, register_live, tail, wait_until_ready
from perfgate.launch.hardware import PROBE_SCRIPT, describe_probe, unknown_hardware
from perfgate.launch.process import OWNER_ENV, free_port
from perfgate.profile import Profile, SshSpec, redact_argv, redact_text

REMOTE_LOG_BYTES = 4 << 20


def env_exports(env: dict[str, str]) -> str:
    """Shell lines exporting ``env`` (names that are not shell identifiers are skipped).
    They go to the remote shell on stdin, so values (tokens) never appear in `ps`."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.isidentifier())


class SshBackend:
    """A server perfgate started on another host over ssh."""

    owned = True

    def __init__(
        self, profile: Profile, engine: Engine, *, log_dir: Path, owner: str = "perfgate"
    ) -> None:
        spec = profile.ssh
        if spec is None:
            raise BackendError(f"profile {profile.name} has no [ssh] table")
        self.spec = spec
        self.engine = engine
        self.model = profile.model.name
        self.stop_grace_s = profile.timeouts.stop_grace_s
        self._control_dir = tempfile.mkdtemp(prefix="perfgate-ssh-")
        self._tunnel: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._final_logs: str | None = None
        self._hardware: dict[str, object] | None = None
        self.env = dict(profile.server.env)
        self._check_connection()
        remote_port = profile.server.port or free_port()
        model = profile.model.path or engine.prepare_model(profile)
        self.argv = engine.launch_command(profile, profile.server.host, remote_port, model)
        name = f"{owner}-{remote_port}"
        self.remote_log = f"{spec.workdir}/{name}.log"
        self.remote_exit = f"{spec.workdir}/{name}.exit"
        self.log_path = log_dir / f"{profile.name}-ssh-{remote_port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._header = f"$ ssh {spec.host} {' '.join(redact_argv(self.argv))}\n"
        self.pgid = self._start(self.env, owner)
        register_live(self)
        local_port = free_port()
        self._tunnel = subprocess.Popen(
            [
                *self._ssh_args(),
                "-N",
                "-o",
                "ExitOnForwardFailure=yes",
                "-L",
                f"127.0.0.1:{local_port}:{profile.server.host}:{remote_port}",
                spec.host,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.base_url = f"http://127.0.0.1:{local_port}"
        self.headers: dict[str, str] = {}  # set by launch() from the profile

    # -- ssh plumbing ------------------------------------------------------------------
    def _ssh_args(self) -> list[str]:
        spec: SshSpec = self.spec
        args = [
            "ssh",
            "-p",
            str(spec.port),
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, int(spec.connect_timeout_s))}",
            "-o",
            f"ControlPath={self._control_dir}/cm",
            "-o",
            "ControlMaster=auto",
            "-o",
            "ControlPersist=120",
        ]
        if spec.identity_file:
            args += ["-i", spec.identity_file, "-o", "IdentitiesOnly=yes"]
        for option in spec.options:
            args += ["-o", option]
        return args

    def _run(
        self, command: str, *, stdin: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._ssh_args(), self.spec.host, command],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def remote_argv(self, command: str) -> list[str]:
        """A local command line that runs ``command`` on the server's host, through the
        same connection, with the profile's server environment exported (as the hardware
        probe runs): for samplers reading that host while a level runs."""
        return [*self._ssh_args(), self.spec.host, env_exports(self.env) + "exec " + command]

    def _check_connection(self) -> None:
        where = f"{self.spec.host} port {self.spec.port}"
        try:
            done = self._run("true", timeout=self.spec.connect_timeout_s + 5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"ssh to {where} failed: {exc}") from exc
        if done.returncode != 0:
            raise BackendError(
                f"ssh to {where} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}. "
                "Check ssh.host, ssh.port, ssh.identity_file, and that sshd runs there."
            )

    def _start(self, env: dict[str, str], owner: str) -> int:
        """Start the server detached under setsid; returns its process group id."""
        q = shlex.quote
        exports = env_exports(env)
        command = " ".join(q(a) for a in self.argv)
        wrapper = f'"$@" >> {q(self.remote_log)} 2>&1; echo $? > {q(self.remote_exit)}'
        # the script goes through stdin, so env values (tokens) never appear in `ps`
        script = (
            f"set -e\nmkdir -p {q(self.spec.workdir)}\n{exports}"
            f"export {OWNER_ENV}={q(owner)}\n"
            f"printf '%s\\n' {q(self._header.rstrip())} > {q(self.remote_log)}\n"
            f"rm -f {q(self.remote_exit)}\n"
            f"setsid sh -c {q(wrapper)} perfgate-server {command} < /dev/null > /dev/null 2>&1 &\n"
            "echo $!\n"
        )
        done = self._run("sh -s", stdin=script)
        if done.returncode != 0 or not done.stdout.strip().isdigit():
            raise BackendStartError(
                f"could not start the server on {self.spec.host} (exit {done.returncode}): "
                f"{redact_text(done.stderr.strip()[-500:])}",
                exit_code=None,
                log_tail="",
            )
        return int(done.stdout.strip().splitlines()[-1])

    # -- Backend -----------------------------------------------------------------------
    def logs(self) -> str:
        if self._final_logs is not None:
            return self._final_logs
        try:
            done = self._run(f"tail -c {REMOTE_LOG_BYTES} {shlex.quote(self.remote_log)}")
        except (OSError, subprocess.TimeoutExpired):
            return self._header
        return redact_text(done.stdout) if done.returncode == 0 else self._header

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.logs(), lines)

    def alive(self) -> bool:
        try:
            done = self._run(f"kill -0 -- -{self.pgid} 2>/dev/null", timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            return True  # the connection hiccupped: the next poll decides
        if done.returncode == 255:
            return True
        return done.returncode == 0 and not self._exit_file()

    def _exit_file(self) -> str:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            done = self._run(f"cat {shlex.quote(self.remote_exit)} 2>/dev/null", timeout=15)
            return done.stdout.strip()
        return ""

    def exit_code(self) -> int | None:
        code = self._exit_file()
        return int(code) if code.lstrip("-").isdigit() else None

    def wait_ready(
        self, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        where = f"{self.spec.host}:{self.remote_log}"
        if self._tunnel is not None and self._tunnel.poll() is not None:
            err = self._tunnel.stderr.read().decode(errors="replace") if self._tunnel.stderr else ""
            raise BackendError(f"the ssh port forward to {self.spec.host} failed: {err[-500:]}")
        wait_until_ready(
            self, self.model, timeout_s, where=where, clock=clock, sleep=sleep, interval_s=0.5
        )

    def hardware(self) -> dict[str, object]:
        """The remote host as the server sees it: the probe runs there, through the same
        connection, with the profile's server environment exported as for the server."""
        if self._hardware is None:
            self._hardware = self._probe_hardware()
        return copy.deepcopy(self._hardware)

    def _probe_hardware(self) -> dict[str, object]:
        source = f"ssh:{self.spec.host}"
        try:
            done = self._run("sh -s", stdin=env_exports(self.env) + PROBE_SCRIPT, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return unknown_hardware(source, f"the hardware probe over ssh failed: {exc}")
        if done.returncode != 0:
            why = redact_text(done.stderr.strip()[-300:])
            return unknown_hardware(
                source, f"the hardware probe over ssh exited {done.returncode}: {why}"
            )
        return describe_probe(done.stdout, source)

    def stop(self) -> None:
        """SIGTERM the remote process group, SIGKILL it after the grace period, fetch the
        log, close the tunnel and the ssh connection."""
        forget_live(self)
        if self._stopped:
            return
        self._stopped = True
        grace = max(1, int(self.stop_grace_s))
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self._run(
                f"kill -TERM -- -{self.pgid} 2>/dev/null; i=0; "
                f"while kill -0 -- -{self.pgid} 2>/dev/null && [ $i -lt {grace * 10} ]; "
                f"do sleep 0.1; i=$((i+1)); done; kill -KILL -- -{self.pgid} 2>/dev/null; true",
                timeout=grace + 20,
            )
        final = self.logs()
        self._final_logs = final
        with contextlib.suppress(OSError):
            self.log_path.write_text(final, encoding="utf-8")
        if self._tunnel is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._tunnel.pid, 15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._tunnel.wait(timeout=5)
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [*self._ssh_args(), "-O", "exit", self.spec.host],
                capture_output=True,
                timeout=10,
                check=False,
            )


def launch_ssh(
    profile: Profile, engine: Engine, log_dir: Path, *, owner: str = "perfgate"
) -> SshBackend:
    """Start the profile's server on its ssh host (not yet waited for: call ``wait_ready``)."""
    return SshBackend(profile, engine, log_dir=log_dir, owner=owner)


__all__ = ["SshBackend", "launch_ssh"]
