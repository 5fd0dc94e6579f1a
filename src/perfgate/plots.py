"""PNG plots of a run (matplotlib, the optional ``plots`` extra). Renders only."""

from __future__ import annotations

from types import ModuleType

from perfgate.errors import PerfgateError

INSTALL_HINT = "pip install 'perfgate[plots]'"


class PlotsUnavailable(PerfgateError):
    """matplotlib is not installed."""


def require_matplotlib() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or a clear error saying
    how to install it."""
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable(
            f"plots need matplotlib, which is not installed: {INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
