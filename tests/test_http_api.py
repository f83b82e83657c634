"""The HTTP API on a real uvicorn server bound to a free loopback port, queried with httpx."""

from __future__ import annotations

import socket
import threading
from urllib.parse import quote

import pytest
from serve_fixtures import ThreadedUvicorn

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def api(service):
    from kbase.serve.http_app import create_app

    with ThreadedUvicorn(create_app(service)) as srv:
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            yield client


def _query_for(indexed_root, i: int = 0) -> str:
    return indexed_root.names[i].replace("-", " ")


def _no_trace(r) -> None:
    assert "Traceback" not in r.text and 'File "' not in r.text


def test_healthz_and_openapi(api):
    h = api.get("/healthz")
    assert h.status_code == 200 and h.json()["ok"] is True and h.json()["generation"]
    spec = api.get("/openapi.json").json()
    assert {
        "/search",
        "/entries/{entry_id}",
        "/history/{repo}/{family}",
        "/stale",
        "/healthz",
    } <= set(spec["paths"])


def test_search_returns_the_cli_json(api, service, indexed_root):
    q = _query_for(indexed_root, 1)
    r = api.get("/search", params={"q": q, "k": 3})
    assert r.status_code == 200
    body = r.json()
    # the same answer as `kbase search --json` (which prints KnowledgeBase.query's result)
    from kbase.schema import SearchQuery

    direct = service.kb.query(SearchQuery.parse(query=q, k=3), auto_index=False)
    assert body == direct.model_dump(mode="json")
    assert set(body) == {"query", "hits", "no_good_match", "candidates"}
    assert indexed_root.names[1] in [h["id"] for h in body["hits"]]


def test_search_filters(api, indexed_root):
    q = _query_for(indexed_root)
    assert (
        api.get("/search", params={"q": q, "kind": "pr"}).json()["hits"] == []
    )  # no PR cards in the root
    assert (
        api.get("/search", params={"q": q, "status": "verified"}).json()["hits"] == []
    )  # no ledger
    unv = api.get("/search", params={"q": q, "status": "unverified", "k": 50}).json()["hits"]
    assert {h["id"] for h in unv} == set(indexed_root.names)
    tagged = api.get("/search", params=[("q", q), ("tag", "languages=tritn")])
    assert (
        tagged.status_code == 400 and "did you mean 'triton'" in tagged.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    "params, code, words",
    [
        ({}, 400, "query is required"),
        ({"q": "   "}, 400, "empty"),
        ({"q": "x" * 2001}, 400, "2000"),
        ({"q": "x", "k": "51"}, 400, "between 1 and 50"),
        ({"q": "x", "k": "0"}, 400, "between 1 and 50"),
        ({"q": "x", "k": "many"}, 400, "integer"),
        ({"q": "x", "kind": "blog"}, 400, "kind"),
        ({"q": "x", "tag": "archs"}, 400, "key=value"),
        ({"q": "x", "status": "great"}, 400, "status"),
        ({"q": "x", "repo": "../../etc"}, 400, "repo"),
        ({"q": "x", "mode": "magic"}, 400, "mode"),
    ],
)
def test_bad_search_input_gets_a_clear_4xx(api, params, code, words):
    r = api.get("/search", params=params)
    assert r.status_code == code, r.text
    assert words in r.json()["error"]["message"]
    _no_trace(r)


def test_entries(api, indexed_root):
    name = indexed_root.names[0]
    full = api.get(f"/entries/{name}")
    assert full.status_code == 200 and full.json()["id"] == name and full.json()["sections"]
    steps = api.get(f"/entries/{name}", params={"section": "steps"})
    assert steps.status_code == 200 and 0 < len(steps.json()["text"]) < len(full.json()["text"])
    assert api.get("/entries/no-such-skill").status_code == 404
    assert api.get(f"/entries/{name}", params={"section": "No Such Section"}).status_code == 404
    # a PR id travels with its '#' encoded; no archive here, so it is a clean 404
    pr = api.get("/entries/" + quote("pr:flashinfer#1234", safe=":"))
    assert pr.status_code == 404 and "pr:flashinfer#1234" in pr.json()["error"]["message"]


@pytest.mark.parametrize(
    "raw_path",
    [
        "/entries/..%2F..%2Fetc%2Fpasswd",
        "/entries/%2e%2e",
        "/entries/Not_An_Id",
        "/entries/" + "a" * 300,
        "/entries/skills%2Fx%2FSKILL.md",
        "/history/..%2F..%2Fetc/x",
        "/history/repo/fam%00ily",
    ],
)
def test_ids_and_names_are_checked_before_any_lookup(api, raw_path):
    r = api.get(raw_path)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["message"]
    _no_trace(r)


def test_history_and_stale(api, indexed_root):
    h = api.get("/history/flashinfer/attention")
    assert h.status_code == 200 and h.json()["available"] is False and h.json()["prs"] == []
    s = api.get("/stale")
    assert s.status_code == 200
    if s.json()["available"]:
        assert {x["skill"] for x in s.json()["skills"]} == set(indexed_root.names)


def test_oversized_and_malformed_requests_are_refused_and_the_server_stays_up(api, indexed_root):
    # httpx will not even build a 1 MB URL, so this one goes over a raw socket
    status = _raw_status(
        api.base_url.port, b"GET /search?q=" + b"x" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    assert status is None or 400 <= status < 500  # refused with a 4xx, or the connection is dropped
    near = api.get("/search", params={"q": "x" * 60_000})
    assert near.status_code == 400 and "2000" in near.json()["error"]["message"]
    big_body = api.post(
        "/search",
        content=b'{"query": "' + b"x" * 1_000_000 + b'"}',
        headers={"content-type": "application/json"},
    )
    assert big_body.status_code == 413 and "bytes" in big_body.json()["error"]["message"]
    ok = api.get("/search", params={"q": _query_for(indexed_root)})
    assert ok.status_code == 200 and ok.json()["hits"]


def _raw_status(port: int, request: bytes):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(request)
            head = s.recv(64)
        except (ConnectionResetError, BrokenPipeError):
            return None
    return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None


def test_clients_that_hang_up_mid_request_do_not_hurt_the_server(api, indexed_root):
    port = api.base_url.port
    for payload in (
        b"GET /search?q=shared%20memory HTTP/1.1\r\nHost: x\r\n\r\n",  # full request, no read
        b"GET /search?q=half",  # request line cut short
        b'POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"query": ',
    ):  # body cut
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(payload)
    # garbage that is not HTTP at all
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"\x00\x01\x02 hello\r\n\r\n")
        s.recv(1024)
    assert api.get("/healthz").json()["ok"] is True
    assert api.get("/search", params={"q": _query_for(indexed_root)}).status_code == 200


def test_concurrent_clients_all_get_answers(api, indexed_root):
    url = str(api.base_url)
    queries = [n.replace("-", " ") for n in indexed_root.names] * 3
    errors: list[str] = []
    results: list[str] = []

    def worker(qs):
        with httpx.Client(base_url=url, timeout=60) as c:
            for q in qs:
                r = c.get("/search", params={"q": q, "k": 3})
                if r.status_code != 200:
                    errors.append(r.text)
                else:
                    results.append(r.json()["hits"][0]["id"])

    threads = [threading.Thread(target=worker, args=(queries[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == len(queries)


def test_a_server_without_an_index_answers_503_then_picks_up_a_new_index(tmp_path):
    from serve_fixtures import copy_skills

    from kbase.api import KnowledgeBase
    from kbase.serve.http_app import create_app
    from kbase.serve.service import Service

    name = copy_skills(tmp_path, n=1)[0]
    kb = KnowledgeBase(root=tmp_path, home=tmp_path / ".kbase", chroma_url="")
    svc = Service(kb)
    svc.prepare(index_if_missing=False, warm=False)
    with ThreadedUvicorn(create_app(svc)) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        r = c.get("/search", params={"q": "anything"})
        assert r.status_code == 503 and "kbase index" in r.json()["error"]["message"]
        assert c.get("/healthz").json()["ok"] is False
        assert not kb.is_indexed()  # the request did not build one
        KnowledgeBase(
            root=tmp_path, home=tmp_path / ".kbase", chroma_url=""
        ).index()  # e.g. a cron job
        r = c.get("/search", params={"q": name.replace("-", " ")})
        assert r.status_code == 200 and r.json()["hits"][0]["id"] == name


def test_search_by_date(api):
    bad = api.get("/search", params={"q": "warp", "since": "yesterday"})
    assert bad.status_code == 400 and "since" in bad.json()["error"]["message"]
    _no_trace(bad)
    ok = api.get("/search", params={"q": "warp", "since": "2020-01-01"})
    assert (
        ok.status_code == 200 and ok.json()["hits"] == []
    )  # skills are undated; only PR cards pass
