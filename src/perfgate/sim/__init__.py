"""perfgate-sim: an OpenAI-compatible streaming server that writes tokens on an exact, known
schedule and records when it actually wrote each chunk.

It is ground truth for perfgate's own measurements (how late the client stamps chunks, TTFT
error) and a target for fault tests. It is **never** a stand-in for a real engine: no test
that claims to test an engine may use it. It imports no other perfgate module, and no
perfgate module imports it (an import-linter contract holds both).

Run it in its own process (:class:`SimProcess`, or ``python -m perfgate.sim``) whenever
timings matter, so it shares neither the client's event loop nor its GIL; :func:`serve`
runs it on the caller's loop for fast structural tests.
"""

from perfgate.sim.config import FAULT_KINDS, Fault, FaultKind, FaultRule, SimConfig, SimConfigError
from perfgate.sim.payloads import WORDS, words
from perfgate.sim.process import SimProcess, SimStartError, fetch_records, reset_records
from perfgate.sim.records import SimRecord
from perfgate.sim.server import SimServer, serve

__all__ = [
    "FAULT_KINDS",
    "WORDS",
    "Fault",
    "FaultKind",
    "FaultRule",
    "SimConfig",
    "SimConfigError",
    "SimProcess",
    "SimRecord",
    "SimServer",
    "SimStartError",
    "fetch_records",
    "reset_records",
    "serve",
    "words",
]
