"""HTTP hardening on a real uvicorn server with kbase's guarded protocol, over raw sockets too.

Chunked bodies are capped like sized ones; invalid Unicode is a 400; Host and Origin are
checked (DNS rebinding); slow headers and slow bodies are cut off; write endpoints exist only
with allow_write and are rate-limited; the server stays up through all of it.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from serve_fixtures import free_port, indexed_root, service  # noqa: F401  (pytest fixtures)

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


class GuardedServer:
    def __init__(self, app, header_timeout: float = 1.0):
        import uvicorn

        from kbase.serve.guard import guarded_protocol

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            http=guarded_protocol(header_timeout),
        )
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def srv(service):  # noqa: F811
    from kbase.serve.http_app import create_app

    app = create_app(service)
    app.body_timeout = 1.0  # the Guard's; 10 s by default
    with GuardedServer(app) as s:
        yield s


def _raw(port: int, data: bytes, read_timeout: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return out


def _status(resp: bytes) -> int | None:
    return int(resp.split()[1]) if resp.startswith(b"HTTP/1.1 ") else None


def test_chunked_body_over_the_limit_is_refused(srv):
    chunk = b"x" * 32768
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(8)) + b"0\r\n\r\n"
    head = (
        b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    resp = _raw(srv.port, head + body)
    assert _status(resp) == 413 and b"larger than" in resp
    assert httpx.get(srv.url + "/healthz").json()["ok"] is True


@pytest.mark.parametrize(
    "content",
    [b'{"query": "\\ud800"}', b'{"query": "\xff\xfe"}', b'{"q\\udfff": "x"}'],
)
def test_invalid_unicode_is_a_400(srv, content):
    r = httpx.post(
        srv.url + "/search", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"]


def test_invalid_utf8_in_the_query_string_is_a_400(srv):
    resp = _raw(
        srv.port, b"GET /search?q=%ff%fe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    assert _status(resp) == 400


def test_host_and_origin_are_checked(srv):
    evil = httpx.get(srv.url + "/healthz", headers={"host": "evil.example"})
    assert evil.status_code == 421
    page = httpx.get(srv.url + "/healthz", headers={"origin": "http://evil.example"})
    assert page.status_code == 403
    same = httpx.get(srv.url + "/healthz", headers={"origin": f"http://localhost:{srv.port}"})
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers


def test_slow_headers_and_slow_bodies_are_cut_off(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finishes the headers
        t0 = time.time()
        assert s.recv(1024) == b""  # closed by the server
        assert time.time() - t0 < 5
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(
            b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"query": '
        )
        t0 = time.time()
        resp = s.recv(1024)
        assert _status(resp) == 408 and time.time() - t0 < 5
    assert httpx.get(srv.url + "/healthz").status_code == 200


def test_write_endpoints_need_allow_write(srv, service, indexed_root, tmp_path):  # noqa: F811
    assert httpx.post(
        srv.url + "/feedback", json={"id": "x", "verdict": "helpful"}
    ).status_code in (
        404,
        405,
    )


def test_writes_with_allow_write_validated_and_rate_limited(tmp_path):
    from serve_fixtures import copy_skills

    from kbase.api import KnowledgeBase
    from kbase.serve.http_app import create_app
    from kbase.serve.service import Service

    names = copy_skills(tmp_path, n=2)
    kb = KnowledgeBase(root=tmp_path, home=tmp_path / ".kbase", chroma_url="")
    svc = Service(kb)
    with GuardedServer(create_app(svc, allow_write=True)) as s, httpx.Client(base_url=s.url) as c:
        ok = c.post("/feedback", json={"id": names[0], "verdict": "helpful", "note": "worked"})
        assert ok.status_code == 200 and ok.json()["feedback"]["counts"]["helpful"] == 1
        typo = c.post("/feedback", json={"id": names[0][:-1], "verdict": "helpful"})
        assert typo.status_code == 404 and "did you mean" in typo.json()["error"]["message"]
        bad = c.post("/feedback", json={"id": names[0], "verdict": "meh"})
        assert bad.status_code == 400 and "verdict" in bad.json()["error"]["message"]
        sneaky = c.post(
            "/propose",
            json={"title": "x", "symptom": "s", "cause": "c", "fix": "f", "name": "../../etc"},
        )
        assert sneaky.status_code == 400  # no `name` field over HTTP at all
        for content in (b"{not json", b"[1, 2]", b'"just a string"'):
            r = c.post("/feedback", content=content, headers={"content-type": "application/json"})
            assert r.status_code == 400 and "Traceback" not in r.text, (content, r.text)
        codes = []
        for i in range(12):
            r = c.post("/feedback", json={"id": names[1], "verdict": "outdated", "note": f"n{i}"})
            codes.append(r.status_code)
        assert 429 in codes and codes.count(200) <= 10
    assert (tmp_path / "feedback" / "log.jsonl").read_text().count("\n") == sum(
        1 for c in codes if c == 200
    ) + 1


def test_deeply_nested_json_is_a_400_not_a_500(srv):
    # issue #28: 10,000 nested {"a": made json.loads raise RecursionError in the guard (a 500)
    deep = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    for ctype in ("application/json", "text/plain"):
        r = httpx.post(srv.url + "/search", content=deep, headers={"content-type": ctype})
        assert r.status_code == 400 and "nests deeper" in r.json()["error"]["message"]
    # brackets inside strings do not count; 64 levels are fine: the app answers (405, no POST
    # route in a read-only server), not the guard
    flat = b'{"query": "' + b"[{" * 200 + b'", "k": 1}'
    r = httpx.post(srv.url + "/search", content=flat, headers={"content-type": "application/json"})
    assert r.status_code == 405, r.text
    assert httpx.get(srv.url + "/healthz").json()["ok"] is True
