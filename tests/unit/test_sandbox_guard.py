"""Where no OS isolation works: generated code is refused, or runs under the audit-hook
guard only when the profile allows it, which still refuses the obvious escapes.
(``/bin/false`` as the bwrap stands for a host without user namespaces.)"""

from __future__ import annotations

import pytest

from perfgate.correctness.sandbox import run_sandboxed
from perfgate.errors import SandboxUnavailable

PRIME = """
def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
"""
PRIME_TESTS = "assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]"


def test_without_isolation_the_code_is_refused():
    """``/bin/false`` stands for a bwrap that cannot create namespaces here."""
    with pytest.raises(SandboxUnavailable, match="code_sandbox = 'allow-guard'"):
        run_sandboxed(PRIME, PRIME_TESTS, bwrap="/bin/false")


def test_the_guard_runs_only_when_allowed_and_says_so():
    result = run_sandboxed(PRIME, PRIME_TESTS, bwrap="/bin/false", allow_guard=True)
    assert result.passed
    assert result.isolation.startswith("audit-hook guard only, NOT OS isolation")


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', 9))\n",
        "import subprocess\nsubprocess.run(['true'])\n",
        "import os\nos.system('true')\n",
        "import os\nos.remove('/etc/hostname')\n",
    ],
)
def test_the_guard_still_refuses_the_obvious(code):
    result = run_sandboxed(code, "", bwrap="/bin/false", allow_guard=True)
    assert not result.passed and "sandbox:" in result.output, result.output
