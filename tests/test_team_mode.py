"""Team mode: `kbase serve` replicas sharing one real Chroma server while one writer re-indexes.

The Chroma server is KBASE_TEST_CHROMA_URL when set (.ci/run starts one), else a `chroma run`
started here on a free loopback port. The skills are synthetic with per-run names, so vectors
left on a shared server by other tests (or earlier runs) cannot collide with ours.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from serve_fixtures import ThreadedUvicorn, synthetic_skill

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

GENERIC = "synthetic test skill"  # every synthetic skill's description starts with these words


def _write(root, name, topic, marker=""):
    d = root / "skills" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "SKILL.md").write_text(synthetic_skill(name, topic, marker), encoding="utf-8")


def _ids(client, **params) -> tuple[int, float, set[str]]:
    t = time.perf_counter()
    r = client.get("/search", params=params)
    return (
        r.status_code,
        t,
        ({h["id"] for h in r.json()["hits"]} if r.status_code == 200 else set()),
    )


def test_replicas_answer_from_old_or_new_index_during_a_reindex(tmp_path, chroma_server):
    from kbase.api import KnowledgeBase
    from kbase.serve.http_app import create_app
    from kbase.serve.service import Service

    tag = uuid.uuid4().hex[:8]
    probe, steady, added = f"team-probe-{tag}", f"team-steady-{tag}", f"team-added-{tag}"
    root = tmp_path / "kb"
    _write(root, probe, "zirconium lattice alignment", "version one")
    _write(root, steady, "bismuth crystal growth")
    url = chroma_server.url

    writer = KnowledgeBase(root=root, home=tmp_path / "writer-home", chroma_url=url)
    first = writer.index()
    assert not first.problems and set(first.embedded_entries) == {probe, steady}

    # Replica A shares the writer's home (same host); replica B has its own home and indexes
    # with --no-gc against the server, which already holds every vector: it embeds nothing.
    rep_a = Service(KnowledgeBase(root=root, home=tmp_path / "writer-home", chroma_url=url))
    kb_b = KnowledgeBase(root=root, home=tmp_path / "replica-b-home", chroma_url=url)
    b_first = kb_b.index(gc=False)
    assert b_first.embedded_chunks == 0 and b_first.entries == 2
    rep_b = Service(kb_b)
    for svc in (rep_a, rep_b):
        svc.prepare(index_if_missing=False, warm=True)

    old, new = {probe, steady}, {probe, steady, added}
    _write(root, probe, "zirconium lattice alignment", "version two with a changed body")
    _write(root, added, "tellurium wire drawing")

    seen: dict[str, list] = {"a": [], "b": []}
    done = threading.Event()
    window: list[float] = []

    def reader(key, base):
        with httpx.Client(base_url=base, timeout=60) as c:
            while True:
                seen[key].append(("all",) + _ids(c, q=GENERIC, k=50))
                # dense only: the probe's vectors change hash and the old ones are deleted by the
                # writer
                seen[key].append(
                    ("dense",) + _ids(c, q="zirconium lattice alignment", k=3, mode="dense")
                )
                # Stop once the last "all" request began after the re-index had finished (the
                # checks below read it): on a loaded machine one request can outlast the 0.3 s.
                if done.is_set() and len(seen[key]) >= 10 and seen[key][-2][2] > window[1]:
                    break

    with ThreadedUvicorn(create_app(rep_a)) as srv_a, ThreadedUvicorn(create_app(rep_b)) as srv_b:
        threads = [
            threading.Thread(target=reader, args=("a", srv_a.url)),
            threading.Thread(target=reader, args=("b", srv_b.url)),
        ]
        for t in threads:
            t.start()
        time.sleep(0.3)
        window.append(time.perf_counter())
        second = (
            writer.index()
        )  # re-embeds the probe and the new skill, then deletes the probe's old vectors
        window.append(time.perf_counter())
        time.sleep(0.3)
        done.set()
        for t in threads:
            t.join(120)
        assert set(second.embedded_entries) == {probe, added}

        for key in ("a", "b"):
            rows = seen[key]
            assert rows and all(code == 200 for _, code, _, _ in rows), [
                r for r in rows if r[1] != 200
            ][:3]
            during = [r for r in rows if window[0] <= r[2] <= window[1]]
            assert during, f"replica {key}: no request overlapped the re-index"
            for what, _, _, ids in rows:
                if what == "all":
                    assert ids in (old, new), f"replica {key} answered {sorted(ids)}"
                else:
                    assert probe in ids, (
                        f"replica {key} lost the probe in dense search: {sorted(ids)}"
                    )
        # A follows the writer's new generation; B keeps serving its own (old) one, complete.
        assert seen["a"][-2][3] == new
        assert all(ids == old for what, _, _, ids in seen["b"] if what == "all")

        # B catches up without embedding anything: the writer already put the vectors on the server.
        b_second = kb_b.index(gc=False)
        assert b_second.embedded_chunks == 0 and b_second.entries == 3
        with httpx.Client(base_url=srv_b.url, timeout=60) as c:
            assert _ids(c, q=GENERIC, k=50)[2] == new
