"""The README stays short, and every relative link in it and in docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 250
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), with an optional "title".
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def links(document: Path) -> list[str]:
    """The link targets written in ``document``'s prose (not in code)."""
    text = CODE_SPAN.sub("", FENCE.sub("", document.read_text()))
    return LINK.findall(text)


def heading_anchors(document: Path) -> set[str]:
    """GitHub's anchors for ``document``'s headings."""
    text = FENCE.sub("", document.read_text())
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 1
        while anchor in anchors:
            anchor, n = f"{slug}-{n}", n + 1
        anchors.add(anchor)
    return anchors


def test_the_readme_is_under_250_lines() -> None:
    lines = README.read_text().count("\n")
    assert lines < MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_in_the_repo(document: Path) -> None:
    broken: list[str] = []
    for target in links(document):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], f"{document.relative_to(ROOT)}: {broken}"


def test_the_checks_see_the_links_they_check() -> None:
    # The README links every document under docs/, and its picture.
    targets = {t.partition("#")[0] for t in links(README)}
    documents = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert documents <= targets, f"README.md does not link {sorted(documents - targets)}"
    assert "docs/gpu-map.png" in targets
    assert "example-queries-answers-from-gpugraph-demo" in heading_anchors(README)


def test_every_make_target_the_readme_runs_exists() -> None:
    blocks = "\n".join(re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.S | re.M))
    targets = set(re.findall(r"^make ([\w-]+)", blocks, re.M))
    assert {"demo", "test", "release-check", "release-image", "release-krew"} <= targets
    makefile = (ROOT / "Makefile").read_text()
    defined = set(re.findall(r"^([\w-]+):", makefile, re.M))
    assert targets <= defined, f"the README runs make {sorted(targets - defined)}"
