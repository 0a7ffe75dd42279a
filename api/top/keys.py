"""``q`` quits ``gpugraph top --watch``: keys read from the terminal while the live view runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator

QUIT_KEYS = b"qQ"


@contextlib.contextmanager
def quit_key(task: asyncio.Task[object] | None) -> Iterator[None]:
    """While inside, a ``q`` typed on the terminal cancels ``task``; the terminal is restored after.

    The terminal goes to cbreak mode (keys arrive one at a time, unechoed) and
    keeps its signals, so Ctrl-C still interrupts. Without a terminal on stdin
    (a pipe, a script), or from the background (``top -w &``, where touching the
    terminal stops the process), nothing is read.
    """
    if task is None or not sys.stdin.isatty():
        yield
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    try:
        foreground = os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        foreground = False  # a terminal that is not this process's controlling one
    if not foreground:
        yield
        return
    saved = termios.tcgetattr(fd)
    loop = asyncio.get_running_loop()

    def pressed() -> None:
        if any(key in QUIT_KEYS for key in os.read(fd, 64)):
            task.cancel()

    tty.setcbreak(fd)
    loop.add_reader(fd, pressed)
    try:
        yield
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
