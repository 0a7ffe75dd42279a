"""The ``gpugraph`` command line: flags to settings, errors, and a real ``serve`` process."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from api.cli import build_parser, main, settings_from_args
from api.settings import Settings, SettingsError
from graph_schema.limits import SchemaLimits
from tests.support.project import project_version
from tests.support.server import GraphTestCluster

REPO_ROOT = Path(__file__).resolve().parents[2]


def parse_serve(*argv: str) -> Settings:
    return settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_defaults_match_the_issue() -> None:
    settings = parse_serve()
    # Fail closed: the command line checks callers unless told --auth none.
    assert settings.auth_mode == "kubernetes"
    assert replace(settings, auth_mode="none") == Settings()
    assert settings.listen == "0.0.0.0:8000"
    assert settings.agent_discovery == "node-ip"
    assert settings.agent_port == 50051
    assert settings.agent_timeout == 2.0
    assert settings.snapshot_ttl == 1.0
    # Kept warm by default, adaptively, within a quarter of one core.
    assert settings.snapshot_keep_warm is None
    assert settings.snapshot_refresh_budget == 0.25
    assert parse_serve("--snapshot-keep-warm", "AUTO").snapshot_keep_warm is None
    assert parse_serve("--snapshot-keep-warm", "0").snapshot_keep_warm == 0.0
    assert (settings.max_depth, settings.max_aliases, settings.max_tokens) == (12, 30, 5000)
    assert settings.max_body_bytes == 1_048_576
    assert settings.max_result_items == 150_000 == SchemaLimits().max_result_items
    assert settings.max_variable_items == 5_000 == SchemaLimits().max_variable_items
    assert settings.limits == SchemaLimits()
    assert settings.max_subscriptions == 200
    assert settings.cors_origins == ()
    assert settings.graphiql is True


def test_every_flag_reaches_the_settings(tmp_path: Path) -> None:
    settings = parse_serve(
        "--listen", "127.0.0.1:9000",
        "--kubeconfig", str(tmp_path / "kc"),
        "--agent-discovery", "pod-ip",
        "--agent-port", "7000",
        "--agent-namespace", "gpu-system",
        "--agent-selector", "app=agent,tier in (a,b)",
        "--agent-timeout", "0.5",
        "--agent-token-file", str(tmp_path / "token"),
        "--snapshot-ttl", "0",
        "--max-depth", "5",
        "--max-aliases", "6",
        "--max-tokens", "700",
        "--max-result-items", "1000",
        "--max-variable-items", "50",
        "--max-body-bytes", "8000",
        "--request-timeout", "3",
        "--max-subscriptions", "9",
        "--max-subscriptions-per-caller", "3",
        "--max-history-reads-per-caller", "8",
        "--max-history-reads-per-caller-per-node", "1",
        "--header-timeout", "4",
        "--cors-origin", "https://a.example.com",
        "--cors-origin", "http://localhost:3000",
        "--no-graphiql",
        "--log-level", "debug",
        "--auth", "kubernetes",
        "--auth-audience", "gpugraph",
        "--auth-cache-ttl", "12",
        "--metrics-dcgm-names",
        "--snapshot-keep-warm", "30",
        "--snapshot-refresh-budget", "0.5",
        "--no-metrics-gpu-series",
        "--no-compiled-execution",
    )  # fmt: skip
    assert settings == Settings(
        listen_host="127.0.0.1",
        listen_port=9000,
        kubeconfig=tmp_path / "kc",
        agent_discovery="pod-ip",
        agent_port=7000,
        agent_namespace="gpu-system",
        agent_selector="app=agent,tier in (a,b)",
        agent_timeout=0.5,
        agent_token_file=tmp_path / "token",
        snapshot_ttl=0.0,
        max_depth=5,
        max_aliases=6,
        max_tokens=700,
        max_result_items=1000,
        max_variable_items=50,
        max_body_bytes=8000,
        request_timeout=3.0,
        max_subscriptions=9,
        max_subscriptions_per_caller=3,
        max_history_reads_per_caller=8,
        max_history_reads_per_caller_per_node=1,
        header_timeout=4.0,
        cors_origins=("https://a.example.com", "http://localhost:3000"),
        graphiql=False,
        log_level="debug",
        auth_mode="kubernetes",
        auth_audiences=("gpugraph",),
        auth_cache_ttl=12.0,
        metrics_dcgm_names=True,
        snapshot_keep_warm=30.0,
        snapshot_refresh_budget=0.5,
        metrics_gpu_series=False,
        compiled_execution=False,
    )
    assert parse_serve("--listen", "[::1]:8080").listen == "[::1]:8080"


def test_every_serve_flag_sets_the_settings_field_of_its_name() -> None:
    # settings_from_args passes each flag on by its dest: a dest that names no
    # Settings field would be dropped without a word.
    args = build_parser("serve").parse_args(["serve"])
    dests = set(vars(args)) - {"command", "handler", "parser", "listen"}
    assert dests <= {f.name for f in dataclasses.fields(Settings)}, dests


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "8000"], "expected HOST:PORT"),
        (["--agent-discovery", "dns"], "invalid choice"),
        (["--agent-timeout", "0"], "must be positive"),
        (["--agent-timeout", "nan"], "must be positive"),
        (["--agent-timeout", "10"], "agent-timeout (10 s) must be shorter than request-timeout"),
        (["--max-result-items", "0"], "max-result-items must be at least 1"),
        (["--max-variable-items", "0"], "max-variable-items must be at least 1"),
        (
            ["--max-history-reads-per-caller-per-node", "0"],
            "max-history-reads-per-caller-per-node must be at least 1",
        ),
        (["--log-level", "verbose"], "invalid choice"),
        (["--snapshot-ttl", "-1"], "must not be negative"),
        (["--snapshot-keep-warm", "soon"], "expected auto or seconds, got 'soon'"),
        (["--snapshot-keep-warm", "-5"], "snapshot-keep-warm must be auto or not negative"),
        (["--snapshot-refresh-budget", "0"], "snapshot-refresh-budget must be positive"),
        (["--max-depth", "0"], "must be at least 1"),
        (["--agent-port", "70000"], "between 1 and 65535"),
        (["--cors-origin", "https://a.example.com/app"], "cors-origin"),
        (["--agent-token-file", "/nonexistent/token"], "--agent-token-file"),
        (["--agent-discovery", "pod-ip", "--agent-selector", "app in (x"], "agent selector"),
    ],
)
def test_bad_flags_are_refused_clearly(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("given", ["debug", "DEBUG", "Debug"])
def test_the_log_level_is_accepted_in_any_case(given: str) -> None:
    assert parse_serve("--log-level", given).log_level == "debug"


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("agent", "serve", "demo"):
        assert command in out


def test_auth_flags() -> None:
    settings = parse_serve("--auth-audience", "gpugraph", "--auth-cache-ttl", "30")
    assert (settings.auth_audiences, settings.auth_cache_ttl) == (("gpugraph",), 30.0)
    assert parse_serve("--auth", "none").auth_mode == "none"
    with pytest.raises(SettingsError, match="auth-audience needs"):
        parse_serve("--auth", "none", "--auth-audience", "x")


def test_a_missing_kubeconfig_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--listen", "127.0.0.1:0", "--kubeconfig", str(tmp_path / "nope")])
    assert code == 1
    assert "no such file" in capsys.readouterr().err


async def test_gpugraph_serve_runs_and_shuts_down_on_sigterm(cluster: GraphTestCluster) -> None:
    argv = [
        sys.executable, "-m", "api.cli", "serve",
        "--listen", "127.0.0.1:0",
        "--kubeconfig", str(cluster.kubeconfig),
        "--agent-port", str(cluster.port),
        "--log-level", "info",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert process.stdout is not None
        url = None
        serving = f"gpugraph {project_version()} serving on 127.0.0.1:0 (auth kubernetes)"
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while (url is None or not any(serving in x for x in lines)) and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if found := re.search(r"running on (http://127\.0\.0\.1:\d+)", line):
                url = found.group(1)
        assert url is not None, "".join(lines)
        # The startup log names the release and how callers are checked, and says it
        # serves only once it has reached the API server (which it said it waits for).
        said = [
            n for n, x in enumerate(lines) if "waiting for the API server at" in x or serving in x
        ]
        assert len(said) == 2 and serving in lines[said[1]], "".join(lines)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            deadline = time.monotonic() + 20
            while (await client.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "not ready within 20 s"
                await asyncio.sleep(0.05)
            query = {"query": '{ node(name: "node-1") { gpus { uuid } } }'}
            # Auth is on by default: no token, no data; the admin's token, the answer.
            refused = await client.post("/graphql", json=query)
            token = cluster.stub.reviews.token_of("admin")
            result = await client.post(
                "/graphql", json=query, headers={"Authorization": f"Bearer {token}"}
            )
            metrics = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert refused.status_code == 401
        assert f'gpugraph_build_info{{version="{project_version()}"}} 1.0' in metrics.text
        assert result.json() == {"data": {"node": {"gpus": [{"uuid": "GPU-node-1-0"}]}}}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_version_prints_the_installed_packages_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gpugraph {project_version()}\n"


def test_the_agent_command_does_not_load_the_graphql_server() -> None:
    # The agent runs on every GPU node; it should not carry the server's imports.
    snippet = (
        "import sys\n"
        "from api.cli import main\n"
        "try:\n"
        "    main(['agent', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('LOADED', sorted(m for m in ('strawberry', 'graph_schema', 'starlette')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", snippet], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "usage: gpugraph agent" in out
    assert "LOADED []" in out


def test_no_introspection_reaches_the_settings() -> None:
    assert parse_serve().introspection is True
    assert parse_serve("--no-introspection").introspection is False
