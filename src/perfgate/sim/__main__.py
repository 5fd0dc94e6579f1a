"""``python -m perfgate.sim``: run the simulator until SIGTERM or SIGINT.

Prints one line, ``perfgate-sim listening on http://HOST:PORT``, once it accepts connections.
With ``--workers N`` (N > 1), N forked processes serve that one port (SO_REUSEPORT: the
kernel spreads connections over them), for more streamed tokens a second than one process
writes. Each keeps its own records on the host's one monotonic clock and also listens on a
control port of its own, printed first as ``perfgate-sim worker K pid P control on URL``:
:class:`perfgate.sim.SimProcess` reads and resets the records there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from perfgate.sim.config import FaultRule, SimConfig, SimConfigError
from perfgate.sim.server import SimServer

READY_PREFIX = "perfgate-sim listening on "
WORKER_LINE = "perfgate-sim worker {worker} pid {pid} control on {url}"


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
    add("--api-key", help="require Authorization: Bearer KEY (all but /health and /sim/*)")
    add("--workers", type=int, default=1, help="processes serving the port (default 1)")
    add(
        "--burst",
        action="store_true",
        default=None,
        help="write each stream whole at its first token's time (client-throughput tests)",
    )
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
            "burst",
            "api_key",
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


def check_workers(config: SimConfig, workers: int) -> None:
    """Refuse what one process's arrival order or load defines; raises SimConfigError."""
    if workers < 1:
        raise SimConfigError(f"--workers must be >= 1 (got {workers})")
    if workers > 1 and config.faults:
        raise SimConfigError(
            "fault rules choose requests by arrival order, which each worker counts apart: "
            "use --workers 1, or a per-request sim_fault in the body"
        )
    if workers > 1 and config.batch_slowdown:
        raise SimConfigError(
            "batch_slowdown counts the requests in flight, which each worker counts apart: "
            "use --workers 1"
        )


def _reuse_port_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on one port (SO_REUSEPORT); port 0 picks one for all."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    for _ in range(count):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
        port = sock.getsockname()[1]
        sockets.append(sock)
    return sockets


async def _worker(
    config: SimConfig, host: str, sock: socket.socket, worker: int, ready: int
) -> None:
    """One worker: serve the shared socket and a control port until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = SimServer(config, worker=worker)
    await server.start(sock=sock)
    control = await server.start(host, 0)
    os.write(
        ready, (WORKER_LINE.format(worker=worker, pid=os.getpid(), url=control) + "\n").encode()
    )
    os.close(ready)
    try:
        await stop.wait()
    finally:
        await server.close()
        # a second SIGTERM (the parent forwards the one killpg sent it too) may come after
        # the loop has restored the default action: held back, it cannot kill a worker
        # that is already ending cleanly
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})


def _serve_with_workers(config: SimConfig, host: str, port: int, workers: int) -> int:
    """Fork the workers, print their lines and the ready line, and wait. A worker that ends
    early ends them all (exit 1); SIGTERM or SIGINT to this process reaches them too."""
    sockets = _reuse_port_sockets(host, port, workers)
    read_end, write_end = os.pipe()
    children: list[int] = []
    for worker, sock in enumerate(sockets):
        pid = os.fork()
        if pid == 0:  # the worker: its own socket only, so none is left unserved
            os.close(read_end)
            for other in sockets:
                if other is not sock:
                    other.close()
            code = 0
            try:
                _run_loop(_worker(config, host, sock, worker, write_end))
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                os._exit(code)
        children.append(pid)
    os.close(write_end)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sockets[0].getsockname()[1]}"
    for sock in sockets:
        sock.close()

    stopping = False  # a stop signal reached this process

    def forward(signum: int) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        forward(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with os.fdopen(read_end) as lines:
        ready = [lines.readline().strip() for _ in range(workers)]
    if not all(ready):
        forward(signal.SIGTERM)
    else:
        print("\n".join(ready), flush=True)
        print(f"{READY_PREFIX}{url}", flush=True)
    failed = not all(ready)
    for _ in children:
        _pid, status = os.wait()
        code = os.waitstatus_to_exitcode(status)
        if stopping and code in (-signal.SIGTERM, -signal.SIGINT):
            code = 0  # ended by the stop signal itself, as asked
        if code != 0 and not failed:
            failed = True
            forward(signal.SIGTERM)  # one worker ended early: end them all
    return 1 if failed else 0


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
        check_workers(config, args.workers)
    except SimConfigError as exc:
        parser.error(str(exc))
    if args.workers > 1:
        return _serve_with_workers(config, args.host, args.port, args.workers)
    _run_loop(run(config, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
