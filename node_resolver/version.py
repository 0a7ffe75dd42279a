"""The installed gpugraph's version, as its package metadata says.

The agent, the server and the CLI all report this one value: in ``gpugraph
--version``, in their startup logs and in ``/metrics``.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

__all__ = ["DISTRIBUTION", "version"]

DISTRIBUTION = "gpugraph"
# A source tree run without being installed has no metadata to read.
UNKNOWN = "0+unknown"


@cache
def version() -> str:
    """The version of the installed ``gpugraph`` distribution."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN
