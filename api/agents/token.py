"""The agent token, read from a file and re-read when the file changes.

Kubernetes updates a mounted Secret in place (it swaps a symlink), so a
rotated token reaches the server without a restart. The file is looked at
no more often than every ``check_every`` seconds, and a change that leaves it
unreadable or empty keeps the token in use.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from node_resolver.auth import read_token_file

from ..settings import SettingsError

__all__ = ["TokenFile"]

log = logging.getLogger(__name__)

# What identifies one version of the file: a swapped symlink changes the
# inode, an in-place rewrite the modification time or size.
_Signature = tuple[int, int, int] | None


class TokenFile:
    """The bearer token in ``path``; SettingsError at construction if unreadable or empty."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        check_every: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.check_every = check_every
        self._clock = clock
        self._signature = self._stat()
        try:
            self._token = read_token_file(self.path)
        except ValueError as exc:
            raise SettingsError(f"--agent-token-file: {exc}") from None
        self._checked_at = clock()

    def current(self) -> str:
        """The token, re-read first if the file changed since it was last looked at."""
        now = self._clock()
        if now - self._checked_at >= self.check_every:
            self._checked_at = now
            signature = self._stat()
            if signature != self._signature:
                self._signature = signature
                self._reload()
        return self._token

    def _reload(self) -> None:
        try:
            token = read_token_file(self.path)
        except ValueError as exc:
            log.warning("agent token file changed but is unusable; keeping the old token: %s", exc)
            return
        if token != self._token:
            log.info("agent token file %s changed; using the new token", self.path)
            self._token = token

    def _stat(self) -> _Signature:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)
