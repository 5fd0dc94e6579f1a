"""What the plugin keeps on pytest's config: the run's session, and the fixtures it
registers where perfgate is configured."""

from __future__ import annotations

import pytest

from perfgate.run.ab import ABRun
from perfgate.run.session import PerfgateSession

# The suites' fixtures, registered where perfgate is configured (not in other projects'
# pytest runs: their own fixtures named client or backend stay theirs)
FIXTURE_MODULES = (
    "perfgate.fixtures.backend",
    "perfgate.fixtures.client",
    "perfgate.fixtures.recorder",
    "perfgate.fixtures.gate",
)


NOT_CONFIGURED = (
    "perfgate is not configured here: no profiles/ directory under the rootdir. Run from "
    "the directory that holds profiles/NAME.toml (perfgate init --perf-base-url URL writes "
    "one), or pass --perf-profile path/to/profile.toml"
)


SESSION_KEY = pytest.StashKey["PerfgateSession | None"]()


AB_KEY = pytest.StashKey["ABRun | None"]()  # --perf-ab: the side-by-side run (B's session)
SIDES = ("A", "B")  # an A/B run's correctness checks run once a side, with these ids


SUMMARY_KEY = pytest.StashKey[list[str]]()


def get_ab(config: pytest.Config) -> ABRun | None:
    """The side-by-side run (``--perf-ab``), or None."""
    return config.stash.get(AB_KEY, None)


def get_session(config: pytest.Config) -> PerfgateSession:
    """The run's session; fails the test clearly where perfgate is not configured."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        pytest.fail(NOT_CONFIGURED, pytrace=False)
    return session
