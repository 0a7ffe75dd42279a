"""Every test that uses an outside tool asks for it first, so a machine without it skips the test.

See tests/layout/outside_tools.py for what counts as using and as asking.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.layout.outside_tools import Checker, Problem
from tests.support.project import ROOT

# Tests that run a stand-in for a tool, which the test itself writes, by the tool's name.
STAND_INS = {
    "tests/deploy/test_dockerfile.py::test_gateway_reports_a_node_too_old_for_it": (
        "runs the gateway's version check against a fake node on its own PATH"
    ),
}


@pytest.fixture(scope="module")
def project() -> list[Problem]:
    """What the checker finds in this project's tests."""
    return Checker(ROOT).problems()


def test_every_test_asks_for_the_outside_tools_it_uses(project: list[Problem]) -> None:
    assert [str(p) for p in project if p.test_id not in STAND_INS] == []


def test_each_stand_in_is_still_there_and_still_found(project: list[Problem]) -> None:
    # An entry whose test is gone, or now asks, would hide the next one by that name.
    assert {p.test_id for p in project} >= set(STAND_INS)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of tests/support (the real helpers) in an otherwise empty project."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    shutil.copytree(
        ROOT / "tests" / "support",
        tmp_path / "tests" / "support",
        ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.h"),
    )
    return tmp_path


def found_in(tree: Path, source: str, *, conftest: str | None = None) -> list[str]:
    """What the checker finds in a test module holding ``source`` (and a conftest.py)."""
    package = tree / "tests" / "case"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "test_case.py").write_text(textwrap.dedent(source))
    if conftest is not None:
        (package / "conftest.py").write_text(textwrap.dedent(conftest))
    return [str(p) for p in Checker(tree).problems()]


def test_a_browser_launched_without_asking_is_found(tree: Path) -> None:
    # As the cluster map's tests were: the module's fixture asked for the map's
    # assets, and each test opened Chromium.
    found = found_in(
        tree,
        """
        import pytest
        from tests.support.browser import chromium
        from tests.support.map_assets import require_map_assets

        @pytest.fixture(scope="module")
        def demo():
            require_map_assets()
            yield "http://127.0.0.1:1"

        def test_map(demo, tmp_path):
            with chromium(tmp_path / "profile") as browser:
                browser.page.goto(demo)
        """,
    )
    assert len(found) == 1
    assert found[0].startswith("tests/case/test_case.py:12: test_map uses a browser (Chromium)")
    assert "never asks" in found[0]


def test_asking_in_a_fixture_the_test_requests_is_enough(tree: Path) -> None:
    found = found_in(
        tree,
        """
        import pytest
        from tests.support.browser import chromium, require_chromium

        @pytest.fixture(scope="module")
        def demo():
            require_chromium()
            yield "http://127.0.0.1:1"

        @pytest.fixture
        def page(demo, tmp_path):
            with chromium(tmp_path / "profile") as browser:
                yield browser.page

        def test_map(page):
            page.goto("/")
        """,
    )
    assert found == []


def test_asking_in_a_conftest_or_autouse_fixture_is_enough(tree: Path) -> None:
    found = found_in(
        tree,
        """
        import pytest
        from tests.support.prometheus import promtool

        pytestmark = pytest.mark.usefixtures("prometheus_installed")

        def test_lint():
            assert promtool("check", "metrics", stdin="").returncode == 0

        def test_autouse():
            from tests.support.containerd import LocalContainerd
            LocalContainerd(None)
        """,
        conftest="""
        import pytest
        from tests.support.containerd import require_containerd
        from tests.support.prometheus import require_prometheus

        @pytest.fixture
        def prometheus_installed():
            require_prometheus()

        @pytest.fixture(autouse=True)
        def containerd_here():
            require_containerd()
        """,
    )
    assert found == []


def test_asking_after_the_use_is_too_late(tree: Path) -> None:
    found = found_in(
        tree,
        """
        from tests.support.browser import chromium, require_chromium

        def test_map(tmp_path):
            with chromium(tmp_path / "profile") as browser:
                require_chromium()
                browser.page.goto("/")
        """,
    )
    assert len(found) == 1 and "asks too late" in found[0]


@pytest.mark.parametrize(
    ("body", "tool"),
    [
        ('subprocess.run(["kubectl", "get", "pods"], check=True)', "kubectl"),
        ('subprocess.Popen("npm ci", shell=True)', "Node.js"),
        ('subprocess.run(["/usr/bin/gcc", "-o", "x", "x.c"])', "a C compiler"),
        ('os.system("helm template chart")', "helm"),
        ("from playwright.sync_api import sync_playwright", "a browser (Chromium)"),
        ('assert shutil.which("promtool")', "Prometheus"),
        ('subprocess.run(("ctr", "version"))', "containerd"),
        ('for tool in ("containerd", "runc"):\n    assert shutil.which(tool)', "containerd"),
    ],
)
def test_running_or_looking_up_a_tool_is_a_use(tree: Path, body: str, tool: str) -> None:
    header = "import os\nimport shutil\nimport subprocess\n\ndef test_it():\n"
    found = found_in(tree, header + textwrap.indent(body, "    ") + "\n")
    assert len(found) == 1 and f"test_it uses {tool} and never asks" in found[0], found


def test_a_skipif_is_not_asking(tree: Path) -> None:
    # pytest.mark.skipif skips even under GPUGRAPH_REQUIRE_ALL=1, where CI must fail.
    found = found_in(
        tree,
        """
        import shutil
        import subprocess
        import pytest

        @pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
        def test_dry_run():
            subprocess.run(["make", "-n", "test"], check=True)
        """,
    )
    assert len(found) == 1 and "test_dry_run uses make and never asks" in found[0]


def test_a_lookup_that_feeds_require_is_asking(tree: Path) -> None:
    found = found_in(
        tree,
        """
        import shutil
        import subprocess
        from tests.support import require, require_on_path
        from tests.support.containerd import LocalContainerd, missing_prerequisite
        from tests.support.kubectl import kubectl_binary

        def test_node():
            node = shutil.which("node")
            require(node is not None, "no node")
            subprocess.run([node, "--version"], check=True)

        def test_make():
            require_on_path("make", "apt-get install make")
            subprocess.run(["make", "-n"], check=True)

        def test_containerd(tmp_path):
            reason = missing_prerequisite()
            require(reason is None, reason or "")
            LocalContainerd(tmp_path).start()

        def test_kubectl():
            subprocess.run([kubectl_binary(), "version"], check=True)
        """,
    )
    assert found == []
