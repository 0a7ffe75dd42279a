"""``q`` on the terminal quits ``top --watch``; a watch in the background leaves the terminal be."""

from __future__ import annotations

import asyncio
import os
import pty
import sys
import termios
from collections.abc import Iterator

import pytest

from api.top.keys import quit_key


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A pseudo-terminal as stdin; the fd of its other end, where keys are typed."""
    typed, ours = pty.openpty()
    stdin = os.fdopen(ours, "r", closefd=True)
    monkeypatch.setattr("sys.stdin", stdin)
    try:
        yield typed
    finally:
        stdin.close()
        os.close(typed)


async def _watch_until_quit(typed: int) -> bool:
    """Whether a q typed on the terminal cancelled the watch."""
    task = asyncio.ensure_future(asyncio.Event().wait())
    with quit_key(task):
        os.write(typed, b"q")
        try:
            await asyncio.wait_for(task, timeout=30)
        except asyncio.CancelledError:
            return True
    return False


def test_q_quits_and_the_terminal_is_as_it_was(
    terminal: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fd = sys.stdin.fileno()
    # The pty is nobody's controlling terminal: say this process is its foreground.
    monkeypatch.setattr(os, "tcgetpgrp", lambda _fd: os.getpgrp())
    before = termios.tcgetattr(fd)
    assert asyncio.run(_watch_until_quit(terminal))
    assert termios.tcgetattr(fd) == before


@pytest.mark.parametrize("owner", ["another group", "no controlling terminal"])
def test_from_the_background_the_terminal_is_not_touched(
    terminal: int, monkeypatch: pytest.MonkeyPatch, owner: str
) -> None:
    # top -w &: setting cbreak mode would stop the process (SIGTTOU), and an interrupt
    # while stopped was a traceback. Another group has the terminal: keys are not read.
    # Nor on a terminal that is not the process's own (the pty here, as under setsid).
    if owner == "another group":
        monkeypatch.setattr(os, "tcgetpgrp", lambda _fd: os.getpgrp() + 1)

    def touched(*_args: object) -> None:
        raise AssertionError("the terminal's mode was changed from the background")

    monkeypatch.setattr(termios, "tcsetattr", touched)

    async def background() -> bool:
        task = asyncio.ensure_future(asyncio.Event().wait())
        with quit_key(task):
            os.write(terminal, b"q\n")
            # What the terminal holds is left for whoever has it: nothing read it.
            assert os.read(sys.stdin.fileno(), 64) == b"q\n"
        cancelled = task.cancelled()
        task.cancel()
        return cancelled

    assert not asyncio.run(background())
