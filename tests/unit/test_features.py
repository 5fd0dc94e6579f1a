"""Feature probing of a server known only as OpenAI-compatible: a strict server that
rejects ``ignore_eos`` (as OpenAI's own API does for unknown fields) makes perfgate drop
the field and say so. The strict server is a few lines of stdlib HTTP here: no engine
here rejects the field on demand."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from perfgate.profile import Profile
from perfgate.run.session import PerfgateSession
from tests.helpers import ROOT


class StrictOpenAI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        unknown = sorted(set(body) - {"model", "prompt", "max_tokens", "temperature", "stream"})
        if unknown:
            payload, status = (
                {"error": {"message": f"Unrecognized request argument: {unknown}"}},
                400,
            )
        else:
            payload, status = (
                {
                    "choices": [{"text": " world", "finish_reason": "length", "index": 0}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
                200,
            )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def strict_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StrictOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_rejected_ignore_eos_is_dropped_and_reported(strict_server, tmp_path):
    profile = Profile.model_validate(
        {
            "name": "strict",
            "engine": "openai",
            "launcher": "attach",
            "hardware": "x",
            "model": {"name": "m"},
            "workload": {"input_len": 8, "output_len": 4, "levels": [1]},
        }
    )
    said: list[str] = []
    session = PerfgateSession(
        profile,
        root=ROOT,
        baselines_dir=tmp_path,
        output_dir=tmp_path,
        base_url=strict_server,
        progress=said.append,
    )
    assert session.plan().extras.get("ignore_eos") is True  # before probing
    session.start_backend()
    assert "ignore_eos" not in session.plan().extras
    warning = next(line for line in said if line.startswith("perfgate: warning:"))
    assert "the server rejects ignore_eos (HTTP 400" in warning
    assert "output lengths are not forced" in warning
    assert any("rejects ignore_eos" in note for note in session.run.notes)
