"""`kbase mcp --http`: the streamable-HTTP MCP app on a real uvicorn server, with SDK clients."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import pytest
from serve_fixtures import ThreadedUvicorn

pytest.importorskip("mcp")
httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def mcp_url(service):
    from kbase.serve.mcp_server import build_server

    app = build_server(service).streamable_http_app(host="127.0.0.1")
    with ThreadedUvicorn(app) as srv:
        yield srv.url + "/mcp"


def test_session_over_streamable_http(mcp_url, indexed_root):
    from mcp import Client

    name = indexed_root.names[2]

    async def main():
        async with Client(mcp_url) as c:
            hit = await c.call_tool("search", {"q": name.replace("-", " "), "k": 3})
            bad = await c.call_tool("search", {"query": ["not", "a", "string"]})
            return hit, bad

    hit, bad = anyio.run(main)
    assert not hit.is_error and name in [h["id"] for h in json.loads(hit.content[0].text)["hits"]]
    assert bad.is_error and "query must be a string" in bad.content[0].text


def test_clients_that_disconnect_mid_call_leave_the_server_serving(mcp_url, indexed_root):
    from mcp import Client

    async def hang_up(delay: float, query: str) -> None:
        try:
            async with Client(mcp_url) as c:
                with anyio.move_on_after(delay):  # leave while the search is still running
                    await c.call_tool("search", {"query": query, "k": 10})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, BaseExceptionGroup):
            # The SDK client can trip over its own teardown when a reply lands as it closes;
            # that is the client's side. What matters here is the server afterwards.
            pass

    async def main():
        for i in range(3):
            await hang_up(0.01, f"warp divergence in a reduction kernel {i}")
        async with anyio.create_task_group() as tg:  # a burst of clients that all hang up at once
            for i in range(6):
                tg.start_soon(hang_up, 0.005 * i, f"shared memory bank conflict {i}")
        async with Client(mcp_url) as c:
            return await c.call_tool("get", {"id": indexed_root.names[0]})

    after = anyio.run(main)
    assert not after.is_error and json.loads(after.content[0].text)["id"] == indexed_root.names[0]


def test_non_mcp_requests_to_the_endpoint_are_refused_cleanly(mcp_url):
    r1 = httpx.post(
        mcp_url,
        content=b"{not json",
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        },
    )
    r2 = httpx.get(mcp_url.replace("/mcp", "/nothing-here"))
    for r in (r1, r2):
        assert 400 <= r.status_code < 500 and "Traceback" not in r.text


def test_sessions_are_bounded_and_expire(service):
    """Issue #28: every initialize used to keep a session forever (8,000: +317 MB)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from mcp_record import initialize_request

    from kbase.serve.mcp_server import build_server

    srv = build_server(service)
    app = srv.streamable_http_app(host="127.0.0.1", max_sessions=3, session_idle_timeout=1.0)
    init = initialize_request("2025-06-18", {"name": "raw", "version": "0"})
    headers = {"accept": "application/json, text/event-stream"}
    with ThreadedUvicorn(app) as srv:
        url = srv.url + "/mcp"

        def initialize() -> httpx.Response:
            return httpx.post(url, json=init, headers=headers, timeout=30)

        first = [initialize() for _ in range(3)]
        assert all(r.status_code == 200 for r in first)
        assert initialize().status_code == 503  # the fourth session is refused
        sid = first[0].headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        time.sleep(2.5)  # every session idle past 1 s: closed
        stale = httpx.post(url, json=ping, headers={**headers, "mcp-session-id": sid}, timeout=30)
        assert stale.status_code == 404
        assert initialize().status_code == 200  # room again
