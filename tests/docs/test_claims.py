"""What the documents say about the demo in prose holds: its size, and what a query costs there."""

from __future__ import annotations

import re
from pathlib import Path

from api.demo.scenario import build_cluster
from tests.support.demo import LiveDemo

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
NUMBERS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_the_readme_says_how_many_nodes_the_demo_has() -> None:
    nodes = len(build_cluster().nodes)
    said = re.search(r"^make demo +# a simulated (\d+)-node GPU cluster", README, re.M)
    assert said is not None and int(said[1]) == nodes
    picture = re.search(r"!\[The GPU map of `make demo`: (\w+) nodes", README)
    assert picture is not None and NUMBERS[picture[1]] == nodes


def test_hardening_md_gives_the_cost_the_demo_estimates_for_its_chain(demo: LiveDemo) -> None:
    text = (ROOT / "docs" / "hardening.md").read_text()
    claim = re.search(
        r"cluster \(`(\{ gpus \{ node .*?)`, estimated at ([\d,]+)\) is refused", text
    )
    assert claim is not None
    body = demo.query(claim[1])
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "QUERY_TOO_COSTLY"
    assert error["extensions"]["estimate"] == int(claim[2].replace(",", ""))


def test_auth_md_names_the_gpus_the_research_token_sees(auth_demo: LiveDemo) -> None:
    text = " ".join((ROOT / "docs" / "auth.md").read_text().split())
    claim = re.search(r"\*\*research\*\* .*?their pods were given \((.*?)\);", text)
    assert claim is not None
    named = set(re.findall(r"GPU (\d+) of `([\w-]+)`", claim[1]))
    query = "{ gpus { index node { name } hiddenProcessCount pods { namespace } } }"
    gpus = auth_demo.query(query, auth_demo.token_of("research-user"))["data"]["gpus"]
    assert {(str(g["index"]), g["node"]["name"]) for g in gpus} == named
    # Its GPUs are its own: nothing hidden, nobody else's pod.
    assert {g["hiddenProcessCount"] for g in gpus} == {0}
    assert {p["namespace"] for g in gpus for p in g["pods"]} == {"research"}


def test_map_md_gives_the_size_of_the_maps_palette() -> None:
    colors = (ROOT / "web" / "map" / "src" / "colors.js").read_text()
    palette = re.search(r"export const PALETTE = \[(.*?)\];", colors, re.S)
    assert palette is not None
    size = len(re.findall(r'"#[0-9a-f]{6}"', palette[1]))
    text = " ".join((ROOT / "docs" / "map.md").read_text().split())
    said = re.search(r"Pod colours come from a palette of (\w+)", text)
    assert said is not None and NUMBERS[said[1]] == size
