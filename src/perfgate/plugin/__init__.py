"""pytest plugin: options, markers, the run's session object, ordering, terminal summary.

Thin by design: the work happens in :mod:`perfgate.run.session`. pytest loads this
package (entry point ``pytest11``) and finds its hooks here: :mod:`.options` (options and
settings), :mod:`.hooks` (the run's life), :mod:`.terminal` (the summary), :mod:`.state`
(the session on pytest's config).
"""

from perfgate.plugin.hooks import (
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_load_initial_conftests,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_sessionstart,
)
from perfgate.plugin.options import pytest_addoption
from perfgate.plugin.state import FIXTURE_MODULES, NOT_CONFIGURED, get_ab, get_session
from perfgate.plugin.terminal import pytest_terminal_summary

__all__ = [
    "FIXTURE_MODULES",
    "NOT_CONFIGURED",
    "get_ab",
    "get_session",
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_load_initial_conftests",
    "pytest_runtest_makereport",
    "pytest_sessionfinish",
    "pytest_sessionstart",
    "pytest_terminal_summary",
]
