"""The map's modules (``web/map/src/*.js``: model, colours, history strip, events, idle
markers) under Node's own test runner.

What a tile draws from a GPU, how subscription ticks mark a node down
(with its agent's error) and up again, and how pods get colours apart from
their neighbours', checked without a browser.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import require_on_path

pytestmark = pytest.mark.node

HERE = Path(__file__).resolve().parent


def test_map_model() -> None:
    node = require_on_path("node", "install Node.js")
    files = sorted(HERE.glob("*.test.mjs"))
    result = subprocess.run(
        [node, "--test", *(str(path) for path in files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.search(r"^# pass (\d+)$", result.stdout, re.MULTILINE)
    # Every test of every file ran, each file's own (the history strip's and the events'
    # included: they once had a runner each, which ran them twice).
    written = {f.name: len(re.findall(r"^test\(", f.read_text(), re.MULTILINE)) for f in files}
    assert written["history.test.mjs"] >= 4 and written["events.test.mjs"] >= 4, written
    assert passed is not None and int(passed.group(1)) == sum(written.values()), result.stdout
    assert "# fail 0" in result.stdout
