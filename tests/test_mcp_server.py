"""The MCP server through a real mcp SDK client connected in memory (same process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import anyio
import pytest

pytest.importorskip("mcp")


def _title(root, name: str) -> str:
    from kbase.ingest.skills import load_skill

    s = load_skill(root / "skills" / name / "SKILL.md", root)
    return s.doc.title


def call(svc, calls):
    """Run [(tool, args)] in one client session; return [(is_error, text)]."""
    from mcp import Client

    from kbase.serve.mcp_server import build_server

    async def main():
        out = []
        async with Client(build_server(svc)) as c:
            for name, args in calls:
                r = await c.call_tool(name, args)
                out.append((r.is_error, r.content[0].text))
        return out

    return anyio.run(main)


def _params(schema: dict) -> dict:
    return schema.get("properties", {})


def _leaf(p: dict) -> dict:
    """The non-null branch of an optional parameter's schema."""
    for branch in p.get("anyOf", []):
        if branch.get("type") != "null":
            return {**branch, **{k: v for k, v in p.items() if k != "anyOf"}}
    return p


def test_tools_describe_every_parameter_and_their_answers(service):
    from mcp import Client

    from kbase.serve.mcp_server import build_server

    async def main():
        async with Client(build_server(service)) as c:
            return c.instructions, (await c.list_tools()).tools

    instructions, tools = anyio.run(main)
    assert {t.name for t in tools} == {"search", "get", "history", "list", "stale"}
    for t in tools:
        assert t.annotations.read_only_hint is True and t.annotations.destructive_hint is False
        assert 20 < len(t.description) < 400, t.name
        assert t.output_schema and t.output_schema.get("properties"), t.name
        for name, p in _params(t.input_schema).items():
            assert p.get("description"), f"{t.name}.{name} has no description"
            if name not in t.input_schema.get("required", []):
                assert "default" in p, f"{t.name}.{name} has no default"
    search = {t.name: t for t in tools}["search"]
    props = _params(search.input_schema)
    assert {"query", "k", "kind", "repo", "tags", "status", "env", "max_chars"} <= set(props)
    assert props["k"]["minimum"] == 1 and props["k"]["maximum"] == 50 and props["k"]["default"] == 5
    assert set(_leaf(props["kind"])["enum"]) == {"skill", "pr"}
    assert (
        "verified" in props["status"]["items"]["enum"]
        and "draft" in props["status"]["items"]["enum"]
    )
    assert props["max_chars"]["minimum"] == 300
    assert "archs=sm90" in props["tags"]["description"]
    hist = _params({t.name: t for t in tools}["history"].input_schema)
    assert {"since", "until", "limit", "cursor"} <= set(hist)
    assert "Do not use" in instructions and "read-only" in instructions


def test_write_tools_only_with_allow_write_and_annotated(service):
    from mcp import Client

    from kbase.serve.mcp_server import build_server

    async def main():
        async with Client(build_server(service, allow_write=True)) as c:
            return c.instructions, (await c.list_tools()).tools

    instructions, tools = anyio.run(main)
    by = {t.name: t for t in tools}
    assert {"feedback", "propose"} <= set(by)
    for name in ("feedback", "propose"):
        a = by[name].annotations
        assert a.read_only_hint is False and a.destructive_hint is False
        assert a.idempotent_hint is False
    assert set(_params(by["feedback"].input_schema)["verdict"]["enum"]) == {
        "helpful",
        "harmful",
        "outdated",
    }
    assert "propose" in instructions


def test_structured_content_matches_the_text(service, indexed_root):
    from mcp import Client

    from kbase.serve.mcp_server import build_server

    name = indexed_root.names[0]

    async def main():
        async with Client(build_server(service)) as c:
            return [
                await c.call_tool(tool, args)
                for tool, args in (
                    ("search", {"query": name.replace("-", " "), "k": 2}),
                    ("get", {"id": name}),
                    ("list", {"kind": "skill"}),
                    ("stale", {}),
                )
            ]

    for r in anyio.run(main):
        assert not r.is_error
        assert r.structured_content == json.loads(r.content[0].text)


def test_search_finds_a_skill_by_its_title_with_compact_hits(service, indexed_root):
    for name in indexed_root.names[:2]:
        [(err, text)] = call(
            service, [("search", {"query": _title(indexed_root.root, name), "k": 3})]
        )
        assert not err, text
        ans = json.loads(text)
        top = ans["hits"][0]
        assert top["id"] == name
        assert top["status"] == "unverified"  # no ledger in the test root
        assert top["where"].startswith(f"skills/{name}/SKILL.md:")
        assert top["more"]["tool"] == "get" and top["more"]["id"] == name
        assert set(top) >= {"id", "title", "kind", "status", "section", "snippet", "where", "more"}


def test_forgiving_argument_names_give_the_same_answer(service, indexed_root):
    q = _title(indexed_root.root, indexed_root.names[0])
    answers = call(
        service,
        [
            ("search", {"query": q, "k": 2}),
            ("search", {"question": q, "top_k": 2}),
            ("search", {"q": q, "limit": "2"}),
        ],
    )
    assert all(not err for err, _ in answers)
    ids = [[h["id"] for h in json.loads(t)["hits"]] for _, t in answers]
    assert ids[0] == ids[1] == ids[2] and len(ids[0]) == 2


def test_max_chars_caps_the_whole_answer(service):
    calls = [
        ("search", {"query": "kernel", "k": 10, "max_chars": b}) for b in (300, 900, 3000, 50_000)
    ]
    answers = call(service, calls)
    sizes = []
    for (_, args), (err, text) in zip(calls, answers, strict=False):
        assert not err, text
        assert len(text) <= args["max_chars"]
        sizes.append(len(json.loads(text)["hits"]))
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]  # a bigger budget never shows fewer hits
    assert "truncated" in json.loads(answers[0][1])


def test_get_full_entry_and_one_section(service, indexed_root):
    name = indexed_root.names[0]
    (e1, full), (e2, steps), (e3, small) = call(
        service,
        [
            ("get", {"id": name}),
            ("get", {"id": name, "section": "steps"}),
            ("get", {"entry_id": name, "max_chars": 400}),
        ],
    )
    assert not (e1 or e2 or e3)
    full, steps, small = json.loads(full), json.loads(steps), json.loads(small)
    assert (
        full["id"] == name
        and "steps" in full["sections"]
        and len(full["text"]) > len(steps["text"]) > 0
    )
    assert "truncated" in small and small["truncated"]["total_chars"] == len(full["text"])


@pytest.mark.parametrize(
    "bad",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "skills/x/SKILL.md",
        "http://x",
        "A" * 500,
        "pr:../x#1",
        "",
    ],
)
def test_get_refuses_ids_that_are_not_ids(service, bad):
    [(err, text)] = call(service, [("get", {"id": bad})])
    assert err and "id" in text and "Traceback" not in text


def test_bad_input_is_refused_clearly_and_the_server_stays_up(service, indexed_root):
    big = "x" * 1_000_000
    calls = [
        ("search", {"query": big}),
        ("search", {"query": 12}),
        ("search", {"query": "a", "k": 0}),
        ("search", {"query": "a", "k": 10_000}),
        ("search", {"query": "a", "kind": "blog"}),
        ("search", {"query": "a", "tags": "archs"}),
        ("search", {"query": "a", "status": ["great"]}),
        ("search", {"query": "a", "frobnicate": True}),
        ("search", {}),
        ("nope", {"x": 1}),
        ("history", {"repo": "../..", "family": "x"}),
        ("get", {"id": "no-such-skill"}),
        ("search", {"query": _title(indexed_root.root, indexed_root.names[0])}),
    ]
    t0 = time.perf_counter()
    answers = call(service, calls)
    assert time.perf_counter() - t0 < 20  # a 1 MB query is refused, not embedded
    *bad, (last_err, last) = answers
    for (name, args), (err, text) in zip(calls, bad, strict=False):
        assert err, (name, str(args)[:80])
        assert "Traceback" not in text and len(text) < 400
    assert "2000" in bad[0][1]  # says what the limit is
    assert "frobnicate" in bad[7][1]
    assert "no entry" in bad[11][1]
    assert not last_err and json.loads(last)["hits"][0]["id"] == indexed_root.names[0]


def test_history_and_stale_degrade_cleanly(service, indexed_root):
    (e1, hist), (e2, stale) = call(
        service, [("history", {"repo": "flashinfer", "family": "attention"}), ("stale", {})]
    )
    assert not e1 and not e2
    hist = json.loads(hist)
    assert hist["available"] is False and hist["prs"] == [] and "archive" in hist["message"]
    stale = json.loads(stale)
    if stale["available"]:
        # no ledger: every skill is unverified, so every one is listed
        assert {s["skill"] for s in stale["skills"]} == set(indexed_root.names)


def test_a_tool_call_never_indexes(tmp_path):
    """With no index the server answers 'no index' and does not build one inside the call."""
    from serve_fixtures import copy_skills

    from kbase.api import KnowledgeBase
    from kbase.serve.service import Service

    copy_skills(tmp_path, n=1)
    svc = Service(KnowledgeBase(root=tmp_path, home=tmp_path / ".kbase", chroma_url=""))
    svc.prepare(index_if_missing=False, warm=False)
    [(err, text)] = call(svc, [("search", {"query": "timing"})])
    assert err and "kbase index" in text
    assert not svc.kb.is_indexed()


def test_a_stopping_server_waits_for_its_start_up_thread(tmp_path):
    """Service.finish joins the start-up thread (here: indexing) before the interpreter exits: an
    exit while it is inside onnxruntime could abort with SIGABRT. A thread still busy after the
    wait is left by exiting at once with status 0, not by finalizing around it."""
    from serve_fixtures import copy_skills

    from kbase.api import KnowledgeBase
    from kbase.serve.service import Service

    copy_skills(tmp_path / "a", n=2)
    svc = Service(KnowledgeBase(root=tmp_path / "a", home=tmp_path / "a" / ".kbase", chroma_url=""))
    svc.start(index_if_missing=True)
    svc.finish(wait_s=300)
    assert svc.thread is not None and not svc.thread.is_alive() and svc.kb.is_indexed()

    copy_skills(tmp_path / "b", n=2)
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO)\n"
        "from kbase.api import KnowledgeBase\n"
        "from kbase.serve.service import Service\n"
        f"kb = KnowledgeBase(root={str(tmp_path / 'b')!r}, home={str(tmp_path / 'hb')!r})\n"
        "svc = Service(kb)\n"
        "svc.start(index_if_missing=True)\n"
        "svc.finish(wait_s=0)\n"
        "print('finalized normally')\n"
    )
    env = dict(os.environ, KBASE_CHROMA_URL="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "start-up still running" in out.stderr and "finalized normally" not in out.stdout


def test_every_hit_says_how_to_read_more_and_that_call_works(service, indexed_root):
    queries = [n.replace("-", " ") for n in indexed_root.names] + ["when should I use this", "fix"]
    answers = call(service, [("search", {"query": q, "k": 5}) for q in queries])
    follow = []
    for err, text in answers:
        assert not err
        follow += [h["more"] for h in json.loads(text)["hits"]]
    assert follow
    results = call(service, [("get", {k: v for k, v in m.items() if k != "tool"}) for m in follow])
    assert all(not err for err, _ in results), [t for e, t in results if e][:3]


def test_list_names_each_wrong_typed_argument(service):
    """Issue #27: list passed wrong-typed arguments to pydantic and answered its raw errors."""
    calls = [
        ("list", {"kind": 5}),
        ("list", {"kind": "kernels"}),
        ("list", {"status": ["verified"]}),
        ("list", {"status": "green"}),
        ("list", {"tag": {"archs": "sm90"}}),
        ("list", {"limit": "ten"}),
        ("list", {"limit": 0}),
        ("list", {"cursor": 7}),
        ("list", {"type": "skills", "limit": "3"}),
    ]
    answers = call(service, calls)
    expected = [
        "kind must be a string, got int",
        "kind must be one of",
        "status must be a string, got list",
        "status must be one of",
        "tag must be a string, got dict",
        "limit must be an integer, got str",
        "limit must be between 1 and",
        "cursor must be a string, got int",
    ]
    for (err, text), want in zip(answers, expected, strict=False):
        assert err and text.startswith("invalid arguments for list: ") and want in text, text
        assert "pydantic" not in text and "validation error" not in text
    err, text = answers[-1]
    assert not err and len(json.loads(text)["entries"]) == 3


def test_resources_and_the_triage_prompt(service, indexed_root):
    """Issue #13: a skill's SKILL.md, the tag vocabulary and the glossary as resources, and a
    prompt that turns an error message into the search -> get -> cite routine."""
    from mcp import Client

    from kbase.serve.mcp_server import build_server

    name = indexed_root.names[0]

    async def main():
        async with Client(build_server(service)) as c:
            listed = {str(r.uri) for r in (await c.list_resources()).resources}
            skill = await c.read_resource(f"kbase://skill/{name}")
            tags = await c.read_resource("kbase://tags")
            prompts = [p.name for p in (await c.list_prompts()).prompts]
            triage = await c.get_prompt("triage-error", {"error": "illegal memory access"})
            return listed, skill, tags, prompts, triage

    listed, skill, tags, prompts, triage = anyio.run(main)
    assert {"kbase://tags", "kbase://glossary"} <= listed
    text = (indexed_root.root / "skills" / name / "SKILL.md").read_text(encoding="utf-8")
    assert skill.contents[0].text == text
    assert "archs" in json.loads(tags.contents[0].text)["keys"]
    assert prompts == ["triage-error"]
    assert "illegal memory access" in triage.messages[0].content.text
