"""The open-file limit: one agent channel per node holds sockets, so a server needs many.

Linux starts processes with a soft limit (often 1,024, here and there 20,000)
far below the hard limit that an unprivileged process may raise it to. A
server holding a gRPC channel to each of 10,000 nodes needs some 20,000
sockets and would otherwise stop accepting HTTP connections. As Go's runtime
has done since 1.19, ``gpugraph serve`` raises the soft limit to the hard one
at start; it never touches the hard limit, which only privileges can raise.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass
from typing import Protocol

__all__ = ["OpenFiles", "ResourceLimits", "raise_open_files_limit"]

log = logging.getLogger(__name__)

# Where the hard limit is unlimited, Linux still caps the soft one at fs.nr_open
# (1,048,576 by default); asking for more fails, so ask for that.
NR_OPEN_DEFAULT = 1_048_576


class ResourceLimits(Protocol):
    """The part of the ``resource`` module this reads and sets (a fake in tests)."""

    RLIMIT_NOFILE: int
    RLIM_INFINITY: int

    def getrlimit(self, resource: int, /) -> tuple[int, int]: ...

    def setrlimit(self, resource: int, limits: tuple[int, int], /) -> None: ...


@dataclass(frozen=True)
class OpenFiles:
    """The soft limit before and after, and the hard limit."""

    before: int
    soft: int
    hard: int


def raise_open_files_limit(limits: ResourceLimits = resource) -> OpenFiles:
    """Raise the soft open-file limit to the hard one, and log what it is now."""
    soft, hard = limits.getrlimit(limits.RLIMIT_NOFILE)
    target = NR_OPEN_DEFAULT if hard == limits.RLIM_INFINITY else hard
    if soft != limits.RLIM_INFINITY and soft < target:
        try:
            limits.setrlimit(limits.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning(
                "open files: could not raise the soft limit from %d to %d (%s); each agent "
                "channel holds sockets, so a large cluster may exhaust it",
                soft,
                target,
                exc,
            )
            return OpenFiles(soft, soft, hard)
        log.info("open files: soft limit raised from %d to %d (the hard limit)", soft, target)
        return OpenFiles(soft, target, hard)
    log.info("open files: soft limit %s (hard %s)", _shown(soft, limits), _shown(hard, limits))
    return OpenFiles(soft, soft, hard)


def _shown(value: int, limits: ResourceLimits) -> str:
    return "unlimited" if value == limits.RLIM_INFINITY else str(value)
