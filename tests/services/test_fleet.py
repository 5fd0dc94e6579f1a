"""``perfgate fleet`` on a real local Ray cluster: a head and two worker nodes started by
the test on this host, with custom resources standing in for two kinds of hardware, and
the two tiny llama.cpp profiles gated on them through the CLI, as users run it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.fleet import remove_orphaned_gate_dirs
from tests.helpers import ROOT, TINY, living, profile_toml, require_ray


@pytest.fixture
def cluster():
    """A head (no CPUs: it runs no gate) and nodes offering kind-a and kind-b."""
    require_ray()
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    nodes = {
        kind: cluster.add_node(num_cpus=1, resources={kind: 1}) for kind in ("kind-a", "kind-b")
    }
    cluster.wait_for_nodes()
    try:
        yield cluster, nodes
    finally:
        cluster.shutdown()


def fleet_profile(tmp_path: Path, name: str, kind: str, **more: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    # the default profile's one thread each: the two nodes share this host's 2 cores (two
    # servers of 2 spinning threads each served 1.4 tok/s a request here)
    path = profile_toml({**TINY, 'name = "tiny"': f'name = "{name}"', **more}, directory, name)
    path.write_text(path.read_text() + f'\n[fleet]\nresources = {{ "{kind}" = 1 }}\n')
    return path


def hand_set_targets(baselines: Path, *names: str) -> Path:
    """The default profile's hardware-independent floors (any.json) for each fleet profile,
    those of its levels: every gate is judged, on whatever hardware runs it."""
    targets = json.loads((ROOT / "baselines/llamacpp-gemma3-270m/any.json").read_text())
    # tok/s floors only: two gates share this host's cores, so TTFT is the neighbour's too
    keys = ("single.c1.per_request_tok_s", "sweep.c1.agg_tok_s")
    targets["metrics"] = {k: v for k, v in targets["metrics"].items() if k in keys}
    for name in names:
        (baselines / name).mkdir(parents=True)
        (baselines / name / "any.json").write_text(json.dumps({**targets, "profile": name}))
    return baselines


def fleet_command(address: str, profiles: list[Path], out: Path, baselines: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "perfgate.cli",
        "fleet",
        f"--address={address}",
        *(f"--profile={p}" for p in profiles),
        f"--output={out}",
        "--",
        f"--override-ini=perfgate_baselines_dir={baselines}",
    ]


def test_a_fleet_runs_each_profile_on_the_node_with_its_resource(cluster, tmp_path):
    ray_cluster, nodes = cluster
    a = fleet_profile(tmp_path, "fleet-a", "kind-a")
    b = fleet_profile(tmp_path, "fleet-b", "kind-b", **{"levels = [1, 2]": "levels = [1]"})
    out = tmp_path / "fleet"
    done = subprocess.run(
        fleet_command(
            ray_cluster.address, [a, b], out, hand_set_targets(tmp_path / "b", "fleet-a", "fleet-b")
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "perfgate fleet: passed: all 2 profiles" in text
    entries = {e["profile"]: e for e in json.loads((out / "fleet.json").read_text())["entries"]}
    assert entries["fleet-a"]["node_id"] == nodes["kind-a"].node_id, entries
    assert entries["fleet-b"]["node_id"] == nodes["kind-b"].node_id, entries
    for name, entry in entries.items():
        assert entry["status"] == "passed" and entry["exit_code"] == 0, entry
        run = json.loads(Path(entry["run_json"]).read_text())  # came back from its node
        assert run["profile"]["name"] == name and run["status"] == "passed"
        assert "sweep" in run["measurements"] and "single" in run["measurements"]
        verdicts = {c["key"]: c["verdict"] for c in run["checks"]}
        assert verdicts["sweep.c1.agg_tok_s"] in ("pass", "improved"), verdicts  # on its node
        assert "passed" in Path(entry["log"]).read_text()  # the gate's own pytest log
    levels = json.loads(Path(entries["fleet-b"]["run_json"]).read_text())["measurements"]
    assert {lv["concurrency"] for lv in levels["sweep"]["levels"]} == {1}  # its own profile
    summary = (out / "fleet.md").read_text()
    assert summary.startswith("## ✅ perfgate fleet: all 2 profiles passed")
    assert "| `fleet-a` | ✅ passed |" in summary and "| `fleet-b` | ✅ passed |" in summary
    # each profile's own run summary below: gated by a floor, so it says floors only
    assert "### ⚠️ perfgate `fleet-a`: passed against floors only" in summary


def _descendants(pid: int) -> set[int]:
    """Every living process under ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _gate_of(profile: Path) -> int | None:
    """The pid of the gate's pytest running ``profile``, once it runs."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--perf-profile={profile}".encode() in args and b"pytest" in args:
            return int(cmdline.parent.name)
    return None


def test_a_node_lost_mid_run_fails_the_fleet_and_its_server_stops(cluster, tmp_path):
    ray_cluster, nodes = cluster
    slow = {"levels = [1, 2]": "levels = [1, 2, 4, 8]", "rounds = 1\n": "rounds = 6\n"}
    b = fleet_profile(tmp_path, "fleet-b", "kind-b", **slow)
    c = fleet_profile(tmp_path, "fleet-c", "kind-c")  # no node offers kind-c
    out = tmp_path / "fleet"
    before = set(Path(tempfile.gettempdir()).glob("perfgate-fleet-*"))
    fleet = subprocess.Popen(
        fleet_command(
            ray_cluster.address, [b, c], out, hand_set_targets(tmp_path / "b", "fleet-b")
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        server_pids: set[int] = set()
        deadline = time.monotonic() + 300
        while not server_pids and time.monotonic() < deadline:
            time.sleep(1)
            if (gate := _gate_of(b)) is not None:
                server_pids = {
                    p
                    for p in _descendants(gate)
                    if b"llama-server" in Path(f"/proc/{p}/cmdline").read_bytes()
                }
        assert server_pids, "the gate of fleet-b never started its server"
        time.sleep(5)  # measuring
        ray_cluster.remove_node(nodes["kind-b"], allow_graceful=False)
        text, _ = fleet.communicate(timeout=300)
    finally:
        if fleet.poll() is None:
            fleet.kill()
    assert fleet.returncode == 1, text
    entries = {e["profile"]: e for e in json.loads((out / "fleet.json").read_text())["entries"]}
    assert entries["fleet-b"]["status"] == "lost", entries
    assert "the node running it was lost" in entries["fleet-b"]["why"]
    assert "perfgate fleet: fleet-b: LOST: the node running it was lost" in text
    assert entries["fleet-c"]["status"] == "unschedulable"
    assert "no node of the cluster offers kind-c 1" in entries["fleet-c"]["why"]
    assert "ray start --address ADDRESS --resources '{\"kind-c\": 1.0}'" in text
    assert "FAILED: 2 of 2 profiles did not pass: fleet-b (lost), fleet-c (unschedulable)" in text
    assert "💀 lost" in (out / "fleet.md").read_text()
    # the lost gate's server got SIGTERM when its pytest died (its parent-death signal)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and living(server_pids):
        time.sleep(1)
    assert not living(server_pids), "server left running (pid: state)"
    # its worker never cleaned up its output directory; the next gate on that host does
    left = [d for d in Path(tempfile.gettempdir()).glob("perfgate-fleet-*") if d not in before]
    assert left, "the lost gate's output directory is expected to be left behind"
    removed: set[Path] = set()
    deadline = time.monotonic() + 60  # the worker exits once it sees its raylet gone
    while time.monotonic() < deadline and not removed >= set(left):
        removed |= set(remove_orphaned_gate_dirs())
        time.sleep(1)
    assert removed >= set(left), (left, removed)
    assert not any(d.exists() for d in left)


def test_without_ray_the_fleet_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    profile = fleet_profile(tmp_path, "fleet-a", "kind-a")
    assert main(["fleet", "--address=127.0.0.1:1", f"--profile={profile}"]) == 2
    assert "perfgate fleet needs Ray: pip install 'perfgate[fleet]'" in capsys.readouterr().err
    assert main(["fleet", "--address=127.0.0.1:1", "--profile=no-such-profile"]) == 2
    assert "unknown profile 'no-such-profile'" in capsys.readouterr().err
