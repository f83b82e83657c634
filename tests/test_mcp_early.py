"""The stdio server answers the MCP handshake before the SDK is loaded (kbase/serve/mcp_early.py),
with what the SDK itself answers, and every request exactly once (issue #27)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from kbase.serve.mcp_early import RECORDED  # noqa: E402


def test_recorded_handshake_is_what_the_sdk_answers():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from mcp_record import record

    live = record()  # ten servers with early answers off, one per protocol version and mode
    assert live == json.loads(RECORDED.read_text()), (
        "the recorded handshake is stale: python bench/mcp_record.py"
    )


def _server(root: Path, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBASE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "kbase.cli", "mcp", "--root", str(root), "--log-level", "debug"]
        + list(extra),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _send(p: subprocess.Popen, *msgs: dict) -> None:
    assert p.stdin
    p.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in msgs))
    p.stdin.flush()


def _close(p: subprocess.Popen) -> tuple[bytes, str]:
    """End the session (stdin closed), expect a clean exit; (what stdout still held, stderr)."""
    p.stdin.close()  # type: ignore[union-attr]
    assert p.wait(30) == 0
    return p.stdout.read(), p.stderr.read().decode()  # type: ignore[union-attr]


def _read(p: subprocess.Popen) -> dict:
    assert p.stdout
    line = p.stdout.readline()
    assert line, "server closed stdout"
    return json.loads(line)


@pytest.mark.parametrize("asked", ["2099-01-01", "2024-11-05"])
def test_legacy_handshake_answered_early_and_every_request_once(tmp_path, asked):
    """initialize and tools/list come from the recording, before the SDK serves; a tool call
    queued behind them is answered by the SDK, which saw the whole conversation; nothing twice.
    The version is negotiated as the SDK does: an unknown one gets the latest, a known one
    itself."""
    from conftest import write_skill

    write_skill(tmp_path, "quasar-shuffle", description="Quasar capacitor warp shuffle.")
    rec = json.loads(RECORDED.read_text())
    t0 = time.perf_counter()
    p = _server(tmp_path, "--no-index", "--allow-write")
    try:
        init = {"capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        _send(
            p,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {**init, "protocolVersion": asked},
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "t", "method": "tools/list"},
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "list", "arguments": {"kind": "skill"}},
            },
        )
        first = _read(p)
        took = time.perf_counter() - t0
        rest = [_read(p) for _ in range(2)]
        _send(p, {"jsonrpc": "2.0", "id": 4, "method": "ping"})
        pong = _read(p)
        leftover, log = _close(p)
    finally:
        p.kill()
    version = asked if asked in rec["handshake_versions"] else rec["latest"]
    assert version == ("2024-11-05" if asked == "2024-11-05" else rec["latest"])
    negotiated = {"protocolVersion": version, **rec["write"]["initialize"]}
    assert first == {"jsonrpc": "2.0", "id": 1, "result": negotiated}
    assert took <= 1.0, f"initialize answered after {took:.2f}s"
    assert rest[0] == {"jsonrpc": "2.0", "id": "t", "result": rec["write"]["tools/list"]}
    assert {t["name"] for t in rest[0]["result"]["tools"]} >= {"search", "feedback", "propose"}
    assert rest[1]["id"] == 3 and not rest[1]["result"]["isError"]
    assert json.loads(rest[1]["result"]["content"][0]["text"])["entries"][0]["id"] == (
        "quasar-shuffle"
    )
    assert pong == {"jsonrpc": "2.0", "id": 4, "result": {}}
    assert leftover == b"", "an answer was sent twice"
    assert "answered initialize before the MCP SDK served" in log
    assert "answered tools/list before the MCP SDK served" in log
    assert "answers otherwise" not in log and "Traceback" not in log


def test_recording_of_another_sdk_or_kbase_version_is_not_used(tmp_path, monkeypatch):
    from kbase.serve import mcp_early

    rec = json.loads(RECORDED.read_text())
    assert mcp_early.recorded_answers(allow_write=False)["initialize"] == rec["read"]["initialize"]
    for key, other in (("mcp", "0.0"), ("kbase", "0.0")):
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({**rec, key: other}))
        monkeypatch.setattr(mcp_early, "RECORDED", path)
        assert mcp_early.recorded_answers(allow_write=False) is None
    monkeypatch.setattr(mcp_early, "RECORDED", RECORDED)
    monkeypatch.setenv("KBASE_MCP_EARLY", "0")
    assert mcp_early.recorded_answers(allow_write=False) is None


def test_modern_discover_and_tools_answered_early_and_once(tmp_path):
    """A 2026-07-28 client (the mcp SDK's default): every request carries the envelope."""
    from conftest import write_skill

    from kbase.serve.mcp_early import ENVELOPE

    write_skill(tmp_path, "quasar-shuffle", description="Quasar capacitor warp shuffle.")
    rec = json.loads(RECORDED.read_text())
    meta = {
        ENVELOPE: rec["modern_versions"][-1],
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    call = {"name": "list", "arguments": {"kind": "skill"}, "_meta": meta}
    p = _server(tmp_path, "--no-index")
    try:
        _send(
            p,
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call},
        )
        got = [_read(p) for _ in range(3)]
        leftover, log = _close(p)
    finally:
        p.kill()
    assert got[0] == {"jsonrpc": "2.0", "id": 1, "result": rec["read"]["modern server/discover"]}
    assert got[1] == {"jsonrpc": "2.0", "id": 2, "result": rec["read"]["modern tools/list"]}
    entries = json.loads(got[2]["result"]["content"][0]["text"])["entries"]
    assert [e["id"] for e in entries] == ["quasar-shuffle"]
    assert leftover == b"", "an answer was sent twice"
    assert "answered server/discover before the MCP SDK served" in log
    assert "answers otherwise" not in log and "Traceback" not in log
