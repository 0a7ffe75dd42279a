"""The graphql-http audit suite (GraphQL-over-HTTP spec) against the real server under uvicorn.

Every MUST and every SHOULD audit must pass; MAY audits are reported only.
The suite is the npm package ``graphql-http`` (tests/federation/package.json),
run by Node.js.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from api.app import create_app
from api.settings import Settings
from tests.federation.gateway import gateway_missing
from tests.support import require
from tests.support.graph import SmallWorld
from tests.support.server import serve_app

NODE_DIR = Path(__file__).resolve().parent.parent / "federation"


def audit_missing() -> str | None:
    """Why the audit cannot run here, or None."""
    missing = gateway_missing()  # Node.js >= 20 and the package folder's install
    if missing is not None:
        return missing
    if not (NODE_DIR / "node_modules" / "graphql-http" / "package.json").is_file():
        return "the graphql-http npm package is not installed; run `cd tests/federation && npm ci`"
    return None


async def test_every_must_and_should_audit_of_graphql_http_passes() -> None:
    missing = audit_missing()
    require(missing is None, str(missing))
    world = SmallWorld()
    settings = Settings()
    app = create_app(settings, world.cluster, world.agents)
    async with serve_app(app, settings) as server:
        # A subprocess on the loop, so the server keeps answering while the audit runs.
        process = await asyncio.create_subprocess_exec(
            "node",
            str(NODE_DIR / "http_audit.mjs"),
            f"{server.url}/graphql",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    results = json.loads(out)
    assert len(results) > 40, "the suite ran its audits"
    failed = [
        f"{r['name']}: {r['reason']}"
        for r in results
        if r["name"].startswith(("MUST", "SHOULD")) and r["status"] != "ok"
    ]
    assert failed == []
