"""What the end-to-end tests share: one real default-profile llama.cpp server for the
tests that attach to it (they never stop it, or change its flags)."""

from __future__ import annotations

import pytest

from tests.helpers import default_server


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    """The default profile's real server, started once for the attaching tests."""
    with default_server(tmp_path_factory.mktemp("shared-server")) as backend:
        yield backend
