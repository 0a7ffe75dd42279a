"""``gpugraph top --watch`` under a real pseudo-terminal (pexpect): live redraws, clean exit."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator

import pexpect
import pytest

from tests.server.top.conftest import kubeconfig_of
from tests.support.demo_process import ROOT, RunningDemo, gpugraph_command

FRAMES = 4
NODE_ROW = re.compile(r"gpu-node-0 +4 +(\d+%) +(\S+Gi/\S+Gi)")
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# rich's Live moves the cursor up and erases lines to draw the next frame over the last.
CURSOR_UP = "\x1b[1A"
ERASE_LINE = "\x1b[2K"
HIDE_CURSOR = "\x1b[?25l"
SHOW_CURSOR = "\x1b[?25h"


@pytest.fixture(autouse=True)
def interruptible_children() -> Iterator[None]:
    """Children get SIGINT's default, as an interactive shell gives a command."""
    # A test run started in the background (nohup, some CI runners) ignores SIGINT, and
    # an ignore is inherited across exec: Ctrl-C would never reach gpugraph top. A
    # handled signal is reset to its default by exec, so the test process handles it
    # while these tests run. (Not a preexec_fn: code run between fork and exec in a
    # process with gRPC's threads can abort the child.)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def spawn_watch(*args: str, view: str = "nodes", rows: int = 40) -> pexpect.spawn:
    command, *first = gpugraph_command()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRAPH_")}
    env.pop("NO_COLOR", None)
    return pexpect.spawn(
        command,
        [*first, "top", view, "--watch", "--interval", "0.5", *args],
        cwd=str(ROOT),
        env={**env, "TERM": "xterm-256color"},
        dimensions=(rows, 160),
        encoding="utf-8",
        timeout=30,
    )


@pytest.mark.parametrize("via", ["server", "kubeconfig"])
def test_watch_redraws_in_place_with_new_values_and_quits_cleanly(
    demo: RunningDemo, via: str
) -> None:
    target = demo.url if via == "server" else str(kubeconfig_of(demo))
    child = spawn_watch(f"--{via}", target)
    try:
        frames: list[str] = []
        for count in range(2, FRAMES + 2):
            child.expect(rf"update {count} at \d\d:\d\d:\d\d")
            frames.append(str(child.before))
        child.sendintr()
        child.expect(pexpect.EOF)
        tail = str(child.before)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus, tail)
    rows = [NODE_ROW.search(ESCAPE.sub("", frame)) for frame in frames]
    assert all(rows), frames
    # Coloured on a terminal; each subscription tick brought new numbers, drawn over
    # the previous frame.
    assert "\x1b[1m" in frames[0]
    assert len({row.groups() for row in rows if row}) > 1, frames
    assert all(CURSOR_UP in frame and ERASE_LINE in frame for frame in frames[1:]), frames
    # Live hid the cursor; on Ctrl-C it shows it again, and nothing else is printed.
    assert HIDE_CURSOR in frames[0]
    assert SHOW_CURSOR in tail
    assert "Traceback" not in tail and "gpugraph top: error" not in tail, tail


def test_q_quits_the_watch_and_gives_the_terminal_back(demo: RunningDemo) -> None:
    child = spawn_watch("--server", demo.url)
    try:
        child.expect(r"update 2 at")
        # The live view reads keys one by one, unechoed.
        assert not child.getecho()
        child.send("q")
        child.expect(pexpect.EOF)
        tail = str(child.before)
        echo_after = child.getecho()
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, tail)
    assert SHOW_CURSOR in tail and "Traceback" not in tail
    assert echo_after, "the terminal was left without echo"


def test_a_short_terminal_gets_the_rows_that_fit_and_a_count_of_the_rest(
    demo: RunningDemo,
) -> None:
    # The demo's GPU view is over 30 rows; 15 lines hold the header, 10 rows,
    # the count, the down node and the footer.
    child = spawn_watch("--server", demo.url, view="gpus", rows=15)
    try:
        child.expect(r"update 2 at")
        frame = ESCAPE.sub("", str(child.before))
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    hidden = re.search(r"\.\.\. (\d+) more rows: narrow with --node or -n", frame)
    assert hidden and int(hidden[1]) > 10, frame
    assert child.exitstatus == 0


def test_ctrl_c_while_the_first_answer_is_awaited_ends_at_once() -> None:
    # A server that takes the connection and never answers: the first query waits.
    with socket.create_server(("127.0.0.1", 0)) as server:
        child = spawn_watch("--server", f"http://127.0.0.1:{server.getsockname()[1]}")
        try:
            server.settimeout(30)
            connection, _ = server.accept()
            child.sendintr()
            # The query's own timeout is 30 s; Ctrl-C must not wait for it.
            child.expect(pexpect.EOF, timeout=10)
            tail = str(child.before)
            connection.close()
        finally:
            child.close(force=True)
    assert child.exitstatus == 130, (child.exitstatus, child.signalstatus, tail)
    assert "Traceback" not in tail and "error" not in tail, tail


SGR = re.compile(r"\x1b\[([0-9;]*)m")
# SGR parameters that set a colour: foreground, background, bright, 256-colour and RGB.
COLOURS = {*range(30, 39), *range(40, 49), *range(90, 98), *range(100, 108)}


def colours_on_a_terminal(demo: RunningDemo, **env: str) -> set[int]:
    """The colour parameters of ``gpugraph top nodes`` printed to a terminal."""
    command, *first = gpugraph_command()
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    child = pexpect.spawn(
        command,
        [*first, "top", "nodes", "--server", demo.url],
        cwd=str(ROOT),
        env={**base, "TERM": "xterm-256color", **env},
        dimensions=(40, 160),
        encoding="utf-8",
        timeout=30,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    params = {int(p) for found in SGR.findall(str(child.before)) for p in found.split(";") if p}
    return params & COLOURS


def test_colour_on_a_terminal_and_none_with_no_color(demo: RunningDemo) -> None:
    # The down node is red on a terminal; NO_COLOR (any value) takes colour away.
    assert 31 in colours_on_a_terminal(demo)
    assert colours_on_a_terminal(demo, NO_COLOR="1") == set()


def test_watch_into_a_pipe_prints_one_whole_frame_per_update(demo: RunningDemo) -> None:
    # As `kubectl get -w | tee log` does: each update is printed when it comes,
    # not held back for a live display that only draws on a terminal.
    command = [*gpugraph_command(), "top", "nodes", "--watch", "--interval", "0.5"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRAPH_")}
    child = subprocess.Popen(
        [*command, "--server", demo.url],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines: list[str] = []
    # A watch that holds its output back would block readline for good: end it.
    watchdog = threading.Timer(60, child.kill)
    watchdog.start()
    try:
        # readline returns as each line is printed; the child flushes every frame.
        for line in iter(child.stdout.readline, ""):
            lines.append(line.rstrip("\n"))
            if line.startswith(f"update {FRAMES} at"):
                break
        child.send_signal(signal.SIGINT)
        rest, err = child.communicate(timeout=30)
    finally:
        watchdog.cancel()
        child.kill()
    assert child.returncode == 0, (child.returncode, lines, err)
    assert "Traceback" not in err
    text = "\n".join(lines)
    stamps = [line for line in lines if re.fullmatch(r"update \d+ at \d\d:\d\d:\d\d", line)]
    assert [s.split()[1] for s in stamps] == [str(n) for n in range(1, FRAMES + 1)], text
    frames = text.split("\n\n")
    assert len(frames) == FRAMES
    for frame in frames[:-1]:
        # Each frame is the whole table under its header, and the down node's line.
        assert frame.splitlines()[1].split()[0] == "NODE", frame
        assert NODE_ROW.search(frame), frame
        assert frame.splitlines()[-1].startswith("gpu-node-3: agent down: "), frame
    assert "\x1b" not in text + rest  # no cursor moves, no colour: a file reads as text
