"""perfgate: a pytest-based performance regression gate for LLM serving engines."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("perfgate")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
