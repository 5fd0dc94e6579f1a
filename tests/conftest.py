"""Test tiers: a test's folder is its tier, and its tier is a marker.

- ``tests/unit``: pure code, fixtures and captures; no server of any kind.
- ``tests/sim``: the simulator (exact timings) and the load generator against it.
- ``tests/engines``: a real engine (llama.cpp, vLLM) driven through perfgate's API.
- ``tests/services``: a real service beside perfgate (Podman, sshd, Ray, bubblewrap).
- ``tests/e2e``: ``pytest -m perf`` in a subprocess on a real engine, as a user runs it.

The README's ``pytest`` runs the quick tiers (unit, sim); ``pytest -m "engine or service
or e2e"`` runs the rest (pyproject's ``addopts`` deselects them by default).

Side by side (pytest-xdist, ``-n 2 --dist loadfile``: the live tiers in ``.ci/run``), each
worker is a lane on a core of its own: the servers it starts and their clients inherit the
core (the profiles' llama-servers run one thread), and carry the lane in their environment
(``PERFGATE_TEST_LANE``), so a test's check for leftover servers sees its own lane's only.
A test file runs in one lane (its module's servers are shared), the longest files first.
Tests marked ``whole_host`` start servers that run two threads, which a core of their own
would stall: they run without ``-n``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIERS = {"unit": "unit", "sim": "sim", "engines": "engine", "services": "service", "e2e": "e2e"}
HERE = Path(__file__).parent
LANE_ENV = "PERFGATE_TEST_LANE"
# the live files that take longest (seconds in a lane on a 2-core Intel host, whole_host
# tests apart): each lane takes the next file as it frees, so these go first
LONGEST = (
    "tests/engines/test_engine_vllm.py",  # ~470
    "tests/e2e/test_ab_e2e.py",  # ~340 (the seeds' drafter side by side: ~120 of it, 2026-12-07)
    "tests/e2e/test_workloads_e2e.py",  # ~320
    "tests/engines/test_engine_sglang.py",  # ~310
    "tests/e2e/test_plugin_e2e.py",  # ~300
    "tests/e2e/test_model_kinds_e2e.py",  # ~190
    "tests/e2e/test_installed_e2e.py",  # ~120
)


LANES = [1]  # pytest-xdist workers side by side (1: none), read once by pytest_configure


def lanes() -> int:
    """How many pytest-xdist workers run side by side (1: none)."""
    return LANES[0]


def module_of(item: pytest.Item) -> str:
    """The test's file, relative to the repository."""
    return item.path.relative_to(HERE.parent).as_posix()


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker of several: its lane's core, and its lane in the environment
    every server it starts inherits. xdist's own variables leave the environment: a
    ``pytest -m perf`` a test starts would take itself for a worker (pytest-benchmark then
    turns itself off, and single requests run once)."""
    worker = os.environ.pop("PYTEST_XDIST_WORKER", None)
    LANES[0] = int(os.environ.pop("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is None or lanes() < 2:
        return
    os.environ[LANE_ENV] = worker
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= lanes():
        os.sched_setaffinity(0, set(cpus[int(worker.removeprefix("gw")) :: lanes()]))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier (before ``-m`` deselects by marker)."""
    for item in items:
        try:
            folder = item.path.relative_to(HERE).parts[0]
        except ValueError:
            continue  # not under tests/ (the suites)
        tier = TIERS.get(folder)
        if tier is None:
            raise pytest.UsageError(
                f"{item.nodeid}: every test lives in a tier folder ({', '.join(TIERS)})"
            )
        item.add_marker(tier)
    if lanes() >= 2:  # the longest files first (a stable sort keeps the rest in order)
        order = {module: rank for rank, module in enumerate(LONGEST)}
        items.sort(key=lambda item: order.get(module_of(item), len(LONGEST)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A whole-host test in a lane fails at once, saying how to run it."""
    if lanes() >= 2 and item.get_closest_marker("whole_host") is not None:
        pytest.fail(
            "marked whole_host: its servers run two threads, which one core of a lane would "
            "stall; run it without -n, or deselect it with -m 'not whole_host'",
            pytrace=False,
        )


@pytest.fixture
def servers_before() -> set[int]:
    """Pids of perfgate-started servers alive before the test (a session's shared server
    among them): a test checks that it left none of its own behind."""
    from tests.helpers import owned_server_pids

    return owned_server_pids()
