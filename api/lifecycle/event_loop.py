"""The event loop ``gpugraph serve`` and the demo run on: uvloop's, as uvicorn picks.

uvicorn chooses uvloop only when it runs the loop itself; the server runs its
own (the cache, the agent pool and uvicorn share it), so it asks for uvloop
here. libuv's loop and transports cut about a twentieth of a small query's
server time (``bench/README.md``).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new uvloop event loop."""
    return uvloop.run(main)
