"""The generated protobuf modules match the .proto files they come from."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "tools" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_generated_code_is_in_sync_with_the_protos() -> None:
    result = run_check(ROOT)
    assert result.returncode == 0, result.stderr


def test_the_check_fails_when_a_proto_changes(tmp_path: Path) -> None:
    # A copy of the tree with one new field: the committed modules are now stale.
    copy = tmp_path / "repo"
    for part in ("tools", "proto", "node_resolver/generated"):
        shutil.copytree(ROOT / part, copy / part)
    proto = copy / "proto" / "gpugraph" / "agent" / "v1" / "agent.proto"
    proto.write_text(
        proto.read_text().replace(
            "message GetSnapshotRequest {}", "message GetSnapshotRequest { bool fresh = 1; }"
        )
    )
    result = run_check(copy)
    assert result.returncode == 1
    assert "agent_pb2.py" in result.stderr


def test_the_check_fails_on_a_module_no_proto_generates(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    for part in ("tools", "proto", "node_resolver/generated"):
        shutil.copytree(ROOT / part, copy / part)
    # Left behind after a .proto was removed or renamed.
    (copy / "node_resolver" / "generated" / "old_pb2.py").write_text("# stale\n")
    result = run_check(copy)
    assert result.returncode == 1
    assert "old_pb2.py" in result.stderr and "__init__.py" not in result.stderr
