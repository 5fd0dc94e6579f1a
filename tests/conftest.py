"""Test tiers: a test's folder is its tier, and its tier is a marker.

- ``tests/unit``: pure code, fixtures and captures; no server of any kind.
- ``tests/sim``: the simulator (exact timings) and the load generator against it.
- ``tests/engines``: a real engine (llama.cpp, vLLM) driven through perfgate's API.
- ``tests/services``: a real service beside perfgate (Podman, sshd, Ray, bubblewrap).
- ``tests/e2e``: ``pytest -m perf`` in a subprocess on a real engine, as a user runs it.

The README's ``pytest`` runs the quick tiers (unit, sim); ``pytest -m "engine or service
or e2e"`` runs the rest (pyproject's ``addopts`` deselects them by default).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = {"unit": "unit", "sim": "sim", "engines": "engine", "services": "service", "e2e": "e2e"}
HERE = Path(__file__).parent


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


@pytest.fixture
def servers_before() -> set[int]:
    """Pids of perfgate-started servers alive before the test (a session's shared server
    among them): a test checks that it left none of its own behind."""
    from tests.helpers import owned_server_pids

    return owned_server_pids()
