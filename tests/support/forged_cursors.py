"""Cursors a client might forge: the compressed cursors of old, bombs and deep nesting.

The server gives out plain positions (``graph_schema/occupancy/cursor.py``); these
are what it must turn down as cheaply as a real cursor is read.
"""

from __future__ import annotations

import base64
import zlib

__all__ = ["old_style_cursor", "zlib_bomb_cursor"]


def old_style_cursor(raw: bytes) -> str:
    """``raw`` as the compressed cursor of old (URL-safe base64 of zlib) carried it."""
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode()


def zlib_bomb_cursor(mib: int = 740) -> str:
    """An old-style cursor of ``mib`` MiB of zeros, ~1.35 KiB of text per MiB (740: 999 KiB).

    Made from one compressed MiB repeated (each flushed in full, so the pieces are
    byte-identical), not by compressing it all: milliseconds instead of seconds.
    """
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(1 << 20)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    piece = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    # Adler-32 of n zero bytes: a stays 1, b adds it n times.
    adler = (((mib << 20) % 65521) << 16) | 1
    stream = b"\x78\xda" + first + piece * (mib - 1) + deflate.flush() + adler.to_bytes(4, "big")
    return base64.urlsafe_b64encode(stream).decode()
