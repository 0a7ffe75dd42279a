"""The version every part of gpugraph reports: the installed package's."""

from __future__ import annotations

from importlib import metadata

import pytest

from node_resolver import version as version_module
from tests.support.project import project_version


def test_the_version_is_the_installed_packages() -> None:
    version_module.version.cache_clear()
    assert version_module.version() == project_version()


def test_a_tree_run_without_installing_says_its_version_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    version_module.version.cache_clear()
    try:
        assert version_module.version() == "0+unknown"
    finally:
        version_module.version.cache_clear()
