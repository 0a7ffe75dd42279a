"""The map's GPU health events (``web/map/src/events.js``) under Node's own test runner."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import require_on_path

pytestmark = pytest.mark.node

HERE = Path(__file__).resolve().parent


def test_map_gpu_events() -> None:
    node = require_on_path("node", "install Node.js")
    result = subprocess.run(
        [node, "--test", str(HERE / "events.test.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.search(r"^# pass (\d+)$", result.stdout, re.MULTILINE)
    tests = len(re.findall(r"^test\(", (HERE / "events.test.mjs").read_text(), re.MULTILINE))
    assert passed is not None and int(passed.group(1)) == tests >= 4, result.stdout
    assert "# fail 0" in result.stdout
