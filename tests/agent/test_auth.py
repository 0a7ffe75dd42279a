"""The agent's token file: rotation without restart, and bad new versions."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import grpc
import pytest

from node_resolver.auth import TokenFile
from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from tests.support.agents import gpu_json, nvml_json, start_agent_thread
from tests.support.clock import ManualClock


def rotate(path: Path, text: str) -> None:
    """Replace the file as a Kubernetes Secret volume does: a new file swapped in."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture
def token_path(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    rotate(path, "first\n")
    return path


def test_a_changed_token_file_takes_effect_at_the_next_check(token_path: Path) -> None:
    clock = ManualClock(100.0)
    token = TokenFile(token_path, check_seconds=5.0, clock=clock)
    assert token.current() == "first"
    rotate(token_path, "second\n")
    clock.now += 4.0
    assert token.current() == "first", "the file is looked at once per check interval"
    clock.now += 1.0
    assert token.current() == "second"


def test_a_bad_new_version_keeps_the_old_token_and_is_logged(
    token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(100.0)
    token = TokenFile(token_path, check_seconds=1.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="node_resolver.auth"):
        rotate(token_path, "  \n")
        for _ in range(3):
            clock.now += 1.0
            assert token.current() == "first"
        token_path.unlink()
        clock.now += 1.0
        assert token.current() == "first"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, "one warning per bad version, not one per check"
    assert "is empty" in warnings[0] and "previous token" in warnings[0]
    rotate(token_path, "third")
    clock.now += 1.0
    assert token.current() == "third"


@pytest.mark.parametrize("content", ["", "\n\t\n"])
def test_an_empty_token_file_at_startup_is_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(ValueError, match="is empty"):
        TokenFile(path)


def test_a_running_agent_accepts_the_rotated_token_only(tmp_path: Path, token_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    token = TokenFile(token_path, check_seconds=0.0)

    def status(given: str) -> grpc.StatusCode:
        async def once() -> grpc.StatusCode:
            async with AgentClient(agent.address, token=given) as client:
                try:
                    await client.get_snapshot(timeout=10)
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
            return grpc.StatusCode.OK

        return asyncio.run(once())

    with start_agent_thread(FakeGpuSource(nvml), token=token.current, interval=3600) as agent:
        assert status("first") == grpc.StatusCode.OK
        rotate(token_path, "second")
        assert status("first") == grpc.StatusCode.UNAUTHENTICATED
        assert status("second") == grpc.StatusCode.OK
