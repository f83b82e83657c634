"""`history` over HTTP and MCP against a small real PR archive, compared with `kbase history
--json`.
"""

from __future__ import annotations

import json

import anyio
import pytest
from conftest import run_cli
from serve_fixtures import ThreadedUvicorn

httpx = pytest.importorskip("httpx")
card_format = pytest.importorskip("kbase.ingest.card_format")


@pytest.fixture(scope="module")
def archive_root(tmp_path_factory):
    """pr_archive/kern/ with four cards written by the archive's own renderer, and its
    family globs.
    """
    from kbase.schema import FileChange, PRCard

    root = tmp_path_factory.mktemp("archivekb")
    folder = root / "pr_archive" / "kern"
    folder.mkdir(parents=True)
    rows = [
        (
            11,
            "2025-01-05",
            "Add fused attention kernel",
            ["csrc/attention/fused.cu"],
            ["attention"],
        ),
        (12, "2025-02-10", "Tune GEMM tiles", ["csrc/gemm/tiles.cu"], ["gemm"]),
        (
            13,
            "2025-03-15",
            "Fix attention mask on the tail",
            ["csrc/attention/fused.cu"],
            ["attention"],
        ),
        (14, "2025-04-20", "Docs only", ["README.md"], []),
    ]
    for pr, date, title, paths, fams in rows:
        card = PRCard(
            repo="kern",
            pr=pr,
            sha=f"{pr:040x}",
            date=f"{date}T12:00:00+00:00",
            title=title,
            families=fams,
            files=[FileChange(path=p, added=3, deleted=1) for p in paths],
        )
        (folder / f"{pr}.md").write_text(card_format.render_card(card), encoding="utf-8")
    (folder / ".state.json").write_text(
        json.dumps(
            {
                "last_sha": "0" * 40,
                "families": {"attention": ["csrc/attention/**"], "gemm": ["csrc/gemm/**"]},
            }
        )
    )
    return root


@pytest.fixture(scope="module")
def history_service(archive_root):
    from kbase.api import KnowledgeBase
    from kbase.serve.service import Service

    # history reads the archive directly: no index and no model are needed for it
    return Service(KnowledgeBase(root=archive_root, home=archive_root / ".kbase", chroma_url=""))


def test_http_history_matches_the_cli(archive_root, history_service):
    from kbase.serve.http_app import create_app

    cli = run_cli("history", "attention", "--repo", "kern", "--root", str(archive_root), "--json")
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    assert [r["pr"] for r in expected["prs"]] == [13, 11]  # newest first, attention only

    with (
        ThreadedUvicorn(create_app(history_service)) as srv,
        httpx.Client(base_url=srv.url, timeout=60) as c,
    ):
        got = c.get("/history/kern/attention")
        assert got.status_code == 200
        body = got.json()
        assert body["available"] is True and body["order"] == "newest-first"
        assert body["prs"] == expected["prs"] and body["globs"] == expected["globs"]
        assert body["order"] == expected["order"] == "newest-first"
        page = c.get("/history/kern/attention", params={"limit": 1}).json()
        assert [r["pr"] for r in page["prs"]] == [13] and page["total"] == 2
        older = c.get(
            "/history/kern/attention", params={"limit": 1, "cursor": page["next_cursor"]}
        ).json()
        assert [r["pr"] for r in older["prs"]] == [11] and older["next_cursor"] is None
        assert [
            r["pr"]
            for r in c.get("/history/kern/attention", params={"until": "2025-02-01"}).json()["prs"]
        ] == [11]
        unknown = c.get("/history/kern/nosuchfamily")
        assert (
            unknown.status_code == 404 and "attention" in unknown.json()["error"]["message"]
        )  # lists known ones
        assert c.get("/history/nosuchrepo/attention").status_code == 404


def test_mcp_history_newest_first_paged_within_a_budget(history_service):
    from mcp import Client

    from kbase.serve.mcp_server import build_server

    def prs(r) -> list[int]:
        assert not r.is_error, r.content[0].text
        return [x["pr"] for x in r.structured_content["prs"]]

    async def main():
        async with Client(build_server(history_service)) as c:
            ask = c.call_tool
            full = await ask("history", {"repository": "kern", "family": "attention"})
            page1 = await ask("history", {"repo": "kern", "family": "attention", "limit": 1})
            page2 = await ask(
                "history",
                {
                    "repo": "kern",
                    "family": "attention",
                    "limit": 1,
                    "cursor": page1.structured_content["next_cursor"],
                },
            )
            since = await ask(
                "history", {"repo": "kern", "family": "attention", "since": "2025-02-01"}
            )
            until = await ask(
                "history", {"repo": "kern", "family": "attention", "until": "2025-02-01"}
            )
            tight = await ask("history", {"repo": "kern", "family": "attention", "max_chars": 300})
            bad = await ask("history", {"repo": "kern", "family": "attention", "cursor": "zzz"})
            typo = await ask("history", {"repo": "kern", "family": "atention"})
            return full, page1, page2, since, until, tight, bad, typo

    full, page1, page2, since, until, tight, bad, typo = anyio.run(main)
    assert prs(full) == [13, 11] and full.structured_content["order"] == "newest-first"
    assert full.structured_content["total"] == 2 and "next_cursor" not in full.structured_content
    assert (
        prs(page1) == [13] and prs(page2) == [11] and "next_cursor" not in page2.structured_content
    )
    assert prs(since) == [13] and prs(until) == [11]
    assert len(tight.content[0].text) <= 300 and "truncated" in tight.structured_content
    assert bad.is_error and "cursor" in bad.content[0].text
    assert typo.is_error and "did you mean 'attention'" in typo.content[0].text
