"""The live tiers' lanes (tests/conftest.py): a lane's check for leftover servers sees the
servers its own lane started, and not the other lane's."""

from __future__ import annotations

import os
import subprocess

from perfgate.launch.process import OWNER_ENV
from tests.helpers import owned_server_pids


def test_a_lane_sees_its_own_servers_only(monkeypatch):
    env = {**os.environ, OWNER_ENV: "perfgate-test", "PERFGATE_TEST_LANE": "gw1"}
    server = subprocess.Popen(["sleep", "60"], env=env)  # a stand-in started by lane gw1
    try:
        monkeypatch.setenv("PERFGATE_TEST_LANE", "gw0")
        assert server.pid not in owned_server_pids()
        monkeypatch.setenv("PERFGATE_TEST_LANE", "gw1")
        assert server.pid in owned_server_pids()
        monkeypatch.delenv("PERFGATE_TEST_LANE")
        assert server.pid in owned_server_pids()  # one test at a time: every server counts
    finally:
        server.kill()
        server.wait()
    assert server.pid not in owned_server_pids()
