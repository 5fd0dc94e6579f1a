"""``python -m perfgate.sim``: run the simulator until SIGTERM or SIGINT.

Prints one line, ``perfgate-sim listening on http://HOST:PORT``, once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from perfgate.sim.config import FaultRule, SimConfig, SimConfigError
from perfgate.sim.server import SimServer

READY_PREFIX = "perfgate-sim listening on "


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m perfgate.sim",
        description="OpenAI-compatible streaming simulator with an exact token schedule.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, default=0, help="port; 0 picks a free one (default 0)")
    add("--config", help="the whole SimConfig as JSON (SimConfig.to_dict); flags override it")
    add("--model", help="model id served (default sim)")
    add("--ttft-ms", type=float, help="time to first token chunk, ms")
    add("--itl-ms", type=float, help="gap between tokens, ms")
    add("--tokens-per-chunk", type=int, help="tokens per stream chunk")
    add("--batch-slowdown", type=float, help="ITL x (1 + this x (in_flight - 1))")
    add("--reasoning-tokens", type=int, help="chat: the first N tokens are reasoning")
    add("--reasoning-field", help="chat: delta field of reasoning (default reasoning_content)")
    add("--max-tokens", type=int, dest="default_max_tokens", help="max_tokens when unset")
    add(
        "--fault",
        action="append",
        default=[],
        metavar="JSON",
        help='a fault rule, repeatable: \'{"kind": "cut", "after": 3, "every": 5}\'',
    )
    return parser


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The config the command line describes; raises :class:`SimConfigError`."""
    try:
        base = SimConfig.from_dict(json.loads(args.config)) if args.config else SimConfig()
        rules = tuple(FaultRule.from_dict(json.loads(rule)) for rule in args.fault)
    except json.JSONDecodeError as exc:
        raise SimConfigError(f"--config/--fault must be JSON: {exc}") from exc
    changes: dict[str, Any] = {
        name: getattr(args, name)
        for name in (
            "model",
            "tokens_per_chunk",
            "batch_slowdown",
            "reasoning_tokens",
            "reasoning_field",
            "default_max_tokens",
        )
        if getattr(args, name) is not None
    }
    if args.ttft_ms is not None:
        changes["ttft_s"] = args.ttft_ms / 1000
    if args.itl_ms is not None:
        changes["itl_s"] = args.itl_ms / 1000
    if rules:
        changes["faults"] = base.faults + rules
    return base.with_changes(**changes)


async def run(config: SimConfig, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT; print the ready line once listening."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = SimServer(config)
    url = await server.start(host, port)
    print(f"{READY_PREFIX}{url}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop  # type: ignore[import-not-found]  # optional; never a dependency
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except SimConfigError as exc:
        parser.error(str(exc))
    _run_loop(run(config, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
