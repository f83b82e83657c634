"""Records what the MCP SDK answers to the handshake of `kbase mcp`, for kbase/serve/mcp_early.py.

    python bench/mcp_record.py          # rewrites kbase/data/mcp_handshake.json

A developer's tool (like bench/fit_fusion.py for kbase/data/fusion.yaml), not part of the package.

Run it after changing a tool, the instructions, the kbase version or the mcp SDK version:
tests/test_mcp_early.py fails until the file says what the server says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kbase.serve.mcp_early import ENVELOPE, RECORDED

CLIENT = {"name": "kbase-record", "version": "1"}


def initialize_request(version: str, client: dict[str, str] = CLIENT) -> dict[str, Any]:
    """The JSON-RPC `initialize` a client opens a (pre-2026-07-28) MCP session with, id 1."""
    init = {"protocolVersion": version, "capabilities": {}, "clientInfo": client}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}


def _requests(version: str, modern: bool) -> list[dict[str, Any]]:
    if modern:
        meta = {
            ENVELOPE: version,
            "io.modelcontextprotocol/clientInfo": CLIENT,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        return [
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}},
        ]
    return [
        initialize_request(version),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]


def live_answers(allow_write: bool, versions: list[tuple[str, bool]]) -> list[list[dict]]:
    """What `kbase mcp` answers (SDK only: KBASE_MCP_EARLY=0) to each version's handshake, one
    server process per version (a connection negotiates once), run side by side."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBASE_")}
    env["KBASE_MCP_EARLY"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "skills").mkdir()
        cmd = [sys.executable, "-m", "kbase.cli", "mcp", "--root", tmp, "--no-index"]
        procs = [
            subprocess.Popen(
                cmd + (["--allow-write"] if allow_write else []),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for _ in versions
        ]
        out = []
        for p, (v, modern) in zip(procs, versions, strict=True):
            assert p.stdin and p.stdout
            p.stdin.write("".join(json.dumps(m) + "\n" for m in _requests(v, modern)))
            p.stdin.flush()
        for p in procs:
            assert p.stdin and p.stdout
            # both answers before EOF: the SDK drops requests still running when stdin ends
            out.append([json.loads(p.stdout.readline()) for _ in range(2)])
            p.stdin.close()
            p.wait(60)
    return out


def record() -> dict[str, Any]:
    """The recorded file's content, from live servers."""
    from importlib.metadata import version

    from mcp_types.version import (
        HANDSHAKE_PROTOCOL_VERSIONS,
        LATEST_HANDSHAKE_VERSION,
        MODERN_PROTOCOL_VERSIONS,
    )

    import kbase

    versions = [(v, False) for v in HANDSHAKE_PROTOCOL_VERSIONS]
    versions += [(v, True) for v in MODERN_PROTOCOL_VERSIONS]
    rec: dict[str, Any] = {
        "kbase": kbase.__version__,
        "mcp": version("mcp"),
        "handshake_versions": list(HANDSHAKE_PROTOCOL_VERSIONS),
        "latest": LATEST_HANDSHAKE_VERSION,
        "modern_versions": list(MODERN_PROTOCOL_VERSIONS),
    }
    for mode in ("read", "write"):
        answers: dict[str, Any] = {}
        for (v, modern), got in zip(versions, live_answers(mode == "write", versions), strict=True):
            if [m.get("id") for m in got] != [1, 2] or any("result" not in m for m in got):
                raise SystemExit(f"{mode} {v}: unexpected answers {got}")
            first, tools = got[0]["result"], got[1]["result"]
            if modern:
                keys = ("modern server/discover", "modern tools/list")
            else:
                if first.pop("protocolVersion") != v:
                    raise SystemExit(f"{mode} {v}: the SDK negotiated another version")
                keys = ("initialize", "tools/list")
            for key, result in zip(keys, (first, tools), strict=True):
                # one answer per era: mcp_early.py answers every version of an era alike
                if answers.setdefault(key, result) != result:
                    raise SystemExit(f"{mode} {v}: {key} differs between versions")
        rec[mode] = answers
    return rec


if __name__ == "__main__":
    RECORDED.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RECORDED}")
