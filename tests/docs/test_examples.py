"""The documented examples run against the demo and answer what the documents show.

Every GraphQL block of the README and docs/ is sent to a running ``gpugraph demo``
cluster; where a JSON block follows it, that is its documented answer and the live
one must have its shape (see ``tests/docs/shapes.py``). The ``gpugraph top``
commands and the ``curl`` of ``/gpu-pods`` in the documents' console blocks are run
too, against the same demo, and their output compared with the documented output:
a table's header, its rows' names, counts and flags, the notes below it (a down
node's line), or the JSON document. So a renamed field, a node the demo no longer
has or an output the product changed fails here, naming the document and line.
One demo, started once, answers them all but the examples of one tenant's token,
which a second, `gpugraph demo --auth`, answers.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.demo.scenario import build_cluster
from tests.docs.shapes import Block, differences, documented_json, fenced_blocks, normalized
from tests.support.demo import LiveDemo
from tests.support.demo_process import gpugraph_command

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The address the documents show for `make demo`'s server.
DOCUMENTED_SERVER = "http://127.0.0.1:8000"
# The demo's node whose agent is down on purpose: errors naming it are part of its story.
DOWN_NODE = build_cluster().down_node
COMMAND_TIMEOUT = 60.0
# Table columns whose values move with the simulated load: only "<unknown>" is compared.
MOVING_COLUMNS = frozenset(
    {"UTIL", "MEMORY", "TEMP", "MAX TEMP", "SM", "GPU-HOURS", "GIB-HOURS", "ALLOC-HOURS",
     "IDLE-HOURS", "TIME"}
)  # fmt: skip
# The tokens a console example names, as `gpugraph demo --auth` prints them: its users.
TOKENS = {"<research token>": "research-user", "<admin token>": "admin"}


def graphql_examples() -> list[tuple[Block, Block | None]]:
    """Each GraphQL block, with the JSON block that follows it before the next GraphQL one."""
    pairs: list[tuple[Block, Block | None]] = []
    for document in DOCUMENTS:
        blocks = fenced_blocks(document)
        for n, block in enumerate(blocks):
            if block.language != "graphql":
                continue
            following = blocks[n + 1] if n + 1 < len(blocks) else None
            answer = following if following is not None and following.language == "json" else None
            pairs.append((block, answer))
    return pairs


@dataclass(frozen=True)
class ConsoleExample:
    """One ``$ command`` of a console block and the output the document shows for it."""

    block: Block
    command: str
    output: str


def console_examples() -> list[ConsoleExample]:
    """The documents' ``gpugraph top`` and ``curl`` commands against the demo's server."""
    examples: list[ConsoleExample] = []
    for document in DOCUMENTS:
        for block in fenced_blocks(document):
            if block.language != "console":
                continue
            for chunk in re.split(r"^(?=\$ )", block.text, flags=re.M):
                command, _, output = chunk.partition("\n")
                if re.match(
                    r"\$ (\S+=(<[^>]*>|\S+) )*(gpugraph top|curl -s '?http://127\.0\.0\.1:8000)",
                    command,
                ):
                    examples.append(ConsoleExample(block, command[2:], output))
    return examples


GRAPHQL = graphql_examples()
CONSOLE = console_examples()


def _with_live_dates(query: str) -> str:
    """A documented history query with its dates moved into the demo's last day."""
    since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    return re.sub(r'"\d{4}-\d\d-\d\dT[\d:]+Z"', f'"{since.strftime("%Y-%m-%dT%H:%M:%SZ")}"', query)


def test_the_documents_have_examples_to_run() -> None:
    where = {block.path.name for block, _ in GRAPHQL}
    assert {"README.md", "queries.md", "allocation.md", "history.md"} <= where
    assert sum(answer is not None for _, answer in GRAPHQL) >= 5
    commands = [example.command for example in CONSOLE]
    assert any(c.startswith("curl") for c in commands)
    assert sum(c.startswith("gpugraph top") for c in commands) >= 5


@pytest.mark.parametrize(
    ("query", "answer"), GRAPHQL, ids=[block.where(ROOT) for block, _ in GRAPHQL]
)
def test_a_documented_query_answers_as_documented(
    demo: LiveDemo, query: Block, answer: Block | None
) -> None:
    body = demo.query(_with_live_dates(query.text))
    if answer is None:
        # No answer shown: it must answer, with no error but the down node's.
        assert body.get("data") is not None, body
        unexpected = [
            e for e in body.get("errors", ()) if f"agent on node '{DOWN_NODE}'" not in e["message"]
        ]
        assert unexpected == [], f"{query.where(ROOT)}: {unexpected}"
        return
    documented = documented_json(answer.text)
    found = differences(documented, body)
    assert found == [], f"{answer.where(ROOT)} differs from the demo's answer:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "example", CONSOLE, ids=[f"{e.block.where(ROOT)} {e.command[:60]}" for e in CONSOLE]
)
def test_a_documented_command_prints_what_the_document_shows(
    request: pytest.FixtureRequest, example: ConsoleExample
) -> None:
    command = example.command
    if any(token in command for token in TOKENS):
        # What one token sees: the same cluster, served by `gpugraph demo --auth`.
        demo: LiveDemo = request.getfixturevalue("auth_demo")
        for token, user in TOKENS.items():
            command = command.replace(token, demo.token_of(user))
    else:
        demo = request.getfixturevalue("demo")
    stdout, stderr = _run(command, demo)
    documented = example.output.strip()
    where = example.block.where(ROOT)
    if documented.startswith("{"):
        found = differences(documented_json(documented), json.loads(stdout))
        assert found == [], f"{where}: `{example.command}` differs:\n" + "\n".join(found)
        return
    # A down node's line goes to stderr, after the table, as the document shows it.
    output = stdout + stderr
    shown, printed = Table.read(documented), Table.read(output)
    assert printed.header == shown.header, f"{where}: `{example.command}`:\n{output}"
    order = sorted if "--since" in example.command else list
    assert order(printed.rows) == order(shown.rows), f"{where}: `{example.command}`:\n{output}"
    assert printed.notes == shown.notes, f"{where}: `{example.command}`:\n{output}"


def _run(command: str, demo: LiveDemo) -> tuple[str, str]:
    """``command`` (as documented) against the demo; its standard output and error."""
    words = [w.replace(DOCUMENTED_SERVER, demo.url) for w in shlex.split(command)]
    env = dict(os.environ)
    while re.match(r"^[A-Z_]+=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words[0] == "curl":
        response = httpx.get(words[-1], timeout=COMMAND_TIMEOUT)
        assert response.status_code == 200, response.text
        return response.text, ""
    if "--kubeconfig" in words:
        words[words.index("--kubeconfig") + 1] = str(demo.demo.kubeconfig)
    done = subprocess.run(
        [*gpugraph_command(), *words[1:]],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"`{command}` exited {done.returncode}: {done.stderr}"
    return done.stdout, done.stderr


@dataclass(frozen=True)
class Table:
    """A table as ``gpugraph top`` prints it, with what moves with the load left out."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...]

    @classmethod
    def read(cls, text: str) -> Table:
        """The header's column names, each row's cells and the lines below the table."""
        lines = [line.rstrip() for line in text.strip("\n").splitlines() if line.strip()]
        header = lines[0]
        starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
        names = tuple(header[s:].split("  ")[0].strip() for s in starts)
        rows: list[tuple[str, ...]] = []
        notes: list[str] = []
        for line in lines[1:]:
            if re.match(r"^\S+: ", line):
                notes.append(normalized(line))
                continue
            ends = [*starts[1:], None]
            cells = [line[s:e].strip() for s, e in zip(starts, ends, strict=True)]
            rows.append(
                tuple(
                    _unknown_or_moving(cell) if name in MOVING_COLUMNS else cell
                    for name, cell in zip(names, cells, strict=True)
                )
            )
        return cls(names, tuple(rows), tuple(notes))


def _unknown_or_moving(cell: str) -> str:
    """A moving cell as compared: ``<unknown>`` and empty stay, a reading becomes ``~``."""
    return cell if cell in ("", "<unknown>") else "~"


def _shape_table() -> dict[str, tuple[set[str], set[str]]]:
    """docs/top.md's table of JSON shapes: per kind, its top-level keys and entry keys."""
    text = (ROOT / "docs" / "top.md").read_text()
    section = text[text.index("## The JSON and YAML shapes") :]
    shapes: dict[str, tuple[set[str], set[str]]] = {}
    for kind, lists, entry in re.findall(
        r"^\| `(\w+)` \([^|]*\) \| ([^|]*) \| ([^\n]*) \|$", section, re.M
    ):
        if kind != "kind":  # the table's own header
            shapes[kind] = (_names(lists), _names(entry))
    return shapes


def _names(cell: str) -> set[str]:
    """The field names a cell of the shape table writes in backticks (not values such as ``up``)."""
    words = set(re.findall(r"`([a-z][A-Za-z]*)`", cell))
    return words - {"up", "down", "null", "top"}


SHAPE_COMMANDS = {
    "GpuList": "gpugraph top",
    "PodList": "gpugraph top pods",
    "NodeList": "gpugraph top nodes",
    "PodUsageList": "gpugraph top --since 24h",
    "NodeUsageList": "gpugraph top nodes --since 24h",
    "NamespaceList": "gpugraph top namespaces",
    "NamespaceUsageList": "gpugraph top namespaces --since 24h",
    "GpuEventList": "gpugraph top --events",
}


def _keys(entries: list[dict[str, Any]]) -> set[str]:
    return {key for entry in entries for key in entry}


def test_top_md_lists_every_field_of_every_json_shape(demo: LiveDemo) -> None:
    shapes = _shape_table()
    assert set(shapes) == set(SHAPE_COMMANDS)
    for kind, command in SHAPE_COMMANDS.items():
        stdout, _ = _run(f"{command} -o json --server {DOCUMENTED_SERVER}", demo)
        document = json.loads(stdout)
        assert document["kind"] == kind
        lists, entry = shapes[kind]
        top_level = set(document) - {"apiVersion", "kind"}
        entries = [
            e
            for key in top_level
            if isinstance(document[key], list) and key not in ("downNodes", "errors")
            for e in document[key]
        ]
        printed = top_level | _keys(entries)
        if kind == "GpuList":
            printed |= _keys([p for gpu in document["gpus"] for p in gpu["processes"]])
        documented = lists | entry
        assert printed - documented == set(), f"docs/top.md's {kind} row lacks these fields"
        assert documented - printed == set(), (
            f"docs/top.md's {kind} row names fields {command} does not print"
        )
