"""A child that dies with its parent: the Linux parent-death signal (PR_SET_PDEATHSIG).

perfgate stops the servers it starts on pass, fail, Ctrl-C and SIGTERM. A parent that is
SIGKILLed (a CI runner's hard kill, the OOM killer, Ray reaping a lost node's workers)
runs no cleanup, and its server, in a session of its own, would keep running. With a
lifeline the kernel sends the child SIGTERM when the process that started it dies, so
the child stops the way a CI time limit stops it.

The signal follows the *thread* that forked: start children from a thread that lives as
long as the process (perfgate launches from pytest's main thread). Elsewhere than Linux
the lifeline is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def lifeline(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets ``signum`` when
    this process dies (None where the platform has no parent-death signal)."""
    if _LIBC is None:
        return None
    parent = os.getpid()
    libc = _LIBC

    def die_with_parent() -> None:  # pragma: no cover (runs in the child before exec)
        # Masks and ignored signals survive exec (Ray workers block some): the child gets
        # SIGTERM and SIGINT unblocked and at their default, so it can be stopped at all.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        for default in (signal.SIGTERM, signal.SIGINT):
            libc.signal(default, ctypes.c_void_p(0))  # SIG_DFL, without Python's handlers
        libc.prctl(PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # the parent died before the prctl took hold
            os.kill(os.getpid(), signum)

    return die_with_parent
