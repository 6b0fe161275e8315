"""dpsql's version, read from the installed package's metadata (``dpsql.__version__``, ``dpsql --version``)."""

from __future__ import annotations

from importlib import metadata


def package_version() -> str:
    """The installed distribution's version, or ``"0+unknown"`` when dpsql runs from a source tree
    that was never installed."""
    try:
        return metadata.version("dpsql")
    except metadata.PackageNotFoundError:
        return "0+unknown"
