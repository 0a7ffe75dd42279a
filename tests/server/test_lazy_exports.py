"""lazy_exports: a package's names imported from their modules on first use, then kept."""

from __future__ import annotations

import importlib
import json
import sys
import types

import pytest

import api
import api.demo
from api.lazy_exports import lazy_exports


def test_a_name_is_imported_from_its_module_once_and_then_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = types.ModuleType("lazy_example")
    monkeypatch.setitem(sys.modules, "lazy_example", package)
    imported: list[str] = []
    real_import = importlib.import_module

    def counting_import(name: str, package_name: str | None = None) -> types.ModuleType:
        imported.append(name)
        return real_import(name, package_name)

    monkeypatch.setattr(importlib, "import_module", counting_import)
    get = lazy_exports(vars(package), {"dumps": "json"})
    first = get("dumps")
    assert first is json.dumps
    assert vars(package)["dumps"] is first  # kept: later lookups skip __getattr__
    assert imported == ["json"]


def test_an_unknown_name_is_an_attribute_error_naming_the_package() -> None:
    get = lazy_exports({"__name__": "lazy_example"}, {})
    with pytest.raises(AttributeError, match="module 'lazy_example' has no attribute 'nope'"):
        get("nope")


@pytest.mark.parametrize(
    ("package", "name", "module"),
    [(api, "create_app", "api.app"), (api.demo, "build_cluster", "api.demo.scenario")],
)
def test_the_packages_export_their_names_lazily(
    package: types.ModuleType, name: str, module: str
) -> None:
    assert getattr(package, name) is getattr(sys.modules[module], name)
    with pytest.raises(AttributeError, match=package.__name__):
        package.no_such_name  # noqa: B018
