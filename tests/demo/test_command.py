"""``gpugraph demo``'s flags: their defaults are DemoConfig's, declared once."""

from __future__ import annotations

import dataclasses

import pytest

from api.cli import build_parser
from api.demo.runner import DemoConfig


def test_every_default_is_demo_configs() -> None:
    args = build_parser("demo").parse_args(["demo"])
    expected = dataclasses.asdict(DemoConfig())
    listen_host, listen_port = args.listen
    given = {
        **{f: getattr(args, f) for f in expected if hasattr(args, f)},
        "listen_host": listen_host,
        "listen_port": listen_port,
    }
    assert given == expected


def test_help_names_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser("demo").parse_args(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    d = DemoConfig()
    assert f"(default {d.nodes})" in text
    assert f"(default {d.gpus_per_node})" in text
    assert f"(default {d.listen_host}:{d.listen_port})" in text
    assert f"(default {d.log_level})" in text


def test_listen_takes_a_bare_port() -> None:
    assert build_parser("demo").parse_args(["demo", "--listen", ":0"]).listen == ("0.0.0.0", 0)
