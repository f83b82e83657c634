"""`kbase mcp` as a subprocess over stdio: a real SDK client session, and raw JSON-RPC lines."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the recorder's request
from mcp_record import initialize_request  # noqa: E402

pytest.importorskip("mcp")


def _kbase() -> list[str]:
    exe = shutil.which("kbase")
    return [exe] if exe else [sys.executable, "-m", "kbase.cli"]


def _home_copy(indexed_root, tmp_path_factory) -> Path:
    # Each server process gets its own copy of the index: an embedded Chroma directory is not
    # meant to be opened by several processes at once (the test process has it open too).
    home = tmp_path_factory.mktemp("mcphome") / ".kbase"
    shutil.copytree(indexed_root.home, home)
    return home


@pytest.fixture(scope="module")
def server_home(indexed_root, tmp_path_factory):
    return _home_copy(indexed_root, tmp_path_factory)


@pytest.fixture(scope="module")
def raw_session(indexed_root, tmp_path_factory):
    # Started before the SDK session's server so the two subprocesses load the model side by side.
    s = RawSession(
        indexed_root,
        _home_copy(indexed_root, tmp_path_factory),
        tmp_path_factory.mktemp("raw") / "stderr.log",
    )
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait(10)
    s.err.close()


def test_sdk_client_session_over_stdio(indexed_root, server_home, raw_session):
    from mcp import Client, StdioServerParameters

    cmd = _kbase()
    env = dict(indexed_root.env(), KBASE_HOME=str(server_home))
    params = StdioServerParameters(
        command=cmd[0], args=cmd[1:] + ["mcp", "--root", str(indexed_root.root)], env=env
    )
    name = indexed_root.names[1]

    async def main():
        async with Client(params, read_timeout_seconds=120) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            hit = await c.call_tool(
                "search", {"question": name.replace("-", " "), "k": 3, "max_chars": 2000}
            )
            doc = await c.call_tool("get", {"id": name, "section": "steps"})
            bad = await c.call_tool("get", {"id": "../etc/passwd"})
            again = await c.call_tool("search", {"query": name.replace("-", " ")})
            return c.instructions, tools, hit, doc, bad, again

    instructions, tools, hit, doc, bad, again = anyio.run(main)
    assert tools == {"search", "get", "history", "list", "stale"} and "kbase" in instructions
    assert not hit.is_error and len(hit.content[0].text) <= 2000
    assert name in [h["id"] for h in json.loads(hit.content[0].text)["hits"]]
    assert not doc.is_error and json.loads(doc.content[0].text)["id"] == name
    assert bad.is_error and "invalid id" in bad.content[0].text
    assert not again.is_error


class RawSession:
    """Newline-delimited JSON-RPC written by hand, to send what no SDK client would."""

    def __init__(self, indexed_root, home: Path, stderr_path: Path):
        self.stderr_path = stderr_path
        self.err = open(stderr_path, "wb")
        env = dict(indexed_root.env(), KBASE_HOME=str(home))
        self.proc = subprocess.Popen(
            _kbase() + ["mcp", "--root", str(indexed_root.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=env,
        )

    def send(self, msg) -> None:
        line = msg if isinstance(msg, str) else json.dumps(msg)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, "server closed stdout"
        return json.loads(line)


def test_malformed_json_rpc_is_answered_and_the_server_stays_up(indexed_root, raw_session):
    s = raw_session
    s.send(initialize_request("2025-06-18", {"name": "raw", "version": "0"}))
    init = s.read()
    assert init["id"] == 1 and "tools" in init["result"]["capabilities"]
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.send("this is not json {")
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "not an object"})
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "nope", "arguments": {}},
        }
    )
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": 7}},
        }
    )
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "q" * 1_000_000}},
        }
    )
    s.send({"jsonrpc": "2.0", "id": 6, "method": "no/such/method"})
    # issue #28: the SDK took a null id for a notification and never answered
    s.send({"jsonrpc": "2.0", "id": None, "method": "tools/list"})
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "search",
                "arguments": {"query": indexed_root.names[0].replace("-", " ")},
            },
        }
    )
    got = [s.read() for _ in range(8)]
    parse = [m for m in got if m.get("id") is None]
    by_id = {m["id"]: m for m in got if m.get("id") is not None}
    assert sorted(m["error"]["code"] for m in parse) == [-32700, -32600]
    assert by_id[2]["error"]["code"] == -32600
    assert by_id[3]["result"]["isError"] and "nope" in by_id[3]["result"]["content"][0]["text"]
    assert by_id[4]["result"]["isError"] and "string" in by_id[4]["result"]["content"][0]["text"]
    assert by_id[5]["result"]["isError"] and "2000" in by_id[5]["result"]["content"][0]["text"]
    assert by_id[6]["error"]["code"] == -32601
    hits = json.loads(by_id[7]["result"]["content"][0]["text"])["hits"]
    assert indexed_root.names[0] in [h["id"] for h in hits]

    # A client that goes away in the middle of a call: it closes its end of the server's stdout
    # first and keeps stdin open, so the server can only learn it from the answer it fails to
    # write. It stops there, cleanly (CI caught this race as an exit 1 with a BrokenPipeError).
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "shared memory bank conflicts"}},
        }
    )
    s.proc.stdout.close()
    rc = s.proc.wait(30)
    s.proc.stdin.close()
    assert rc == 0
    s.err.flush()
    log = s.stderr_path.read_text(errors="replace")
    assert "Traceback" not in log


def test_a_client_that_never_reads_stops_the_server_cleanly(indexed_root, tmp_path_factory):
    # Its end of the server's stdout is closed before the handshake: the early answer to
    # `initialize` and every later answer fail to be written. The server stops at the first
    # failure, and neither its handshake thread nor the SDK's tasks leave a traceback.
    home = _home_copy(indexed_root, tmp_path_factory)
    s = RawSession(indexed_root, home, home.parent / "stderr.log")
    try:
        s.proc.stdout.close()
        lines = [
            initialize_request("2025-06-18", {"name": "raw", "version": "0"}),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        # one write: the server may be gone before a second one
        s.send("\n".join(json.dumps(m) for m in lines))
        rc = s.proc.wait(30)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
        s.err.close()
    s.proc.stdin.close()
    log = s.stderr_path.read_text(errors="replace")
    assert rc == 0 and "Traceback" not in log, log[-2000:]
    assert "the client closed the connection" in log
