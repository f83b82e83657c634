"""Inputs that must not crash a command: the bad file is refused with path:line, the rest served."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import skill_text
from serve_fixtures import ThreadedUvicorn, synthetic_skill
from typer.testing import CliRunner

from kbase.cli import app

GOOD = "good-skill"
VERIFY = "\n```python verify\nassert 1 + 1 == 2\n```\n"
# nine anchors, each nine aliases of the one before: 9**9 leaves once expanded
ALIAS_BOMB = "notes:\n  l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)
)


def _hostile(root: Path, outside: Path) -> dict[str, str]:
    """name -> text each hostile SKILL.md must be rejected with."""
    skills = root / "skills"

    def put(name: str, text: str | bytes) -> None:
        (skills / name).mkdir(parents=True, exist_ok=True)
        f = skills / name / "SKILL.md"
        f.write_bytes(text if isinstance(text, bytes) else text.encode())

    put(GOOD, synthetic_skill(GOOD, "warp shuffle reductions", "zebracorn"))
    put("deep-flow", skill_text("deep-flow", extra="notes: " + "[" * 5000 + "]" * 5000 + "\n"))
    nested = (
        "notes:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 1100)) + " " * 1100 + "v: 1\n"
    )
    put("deep-block", skill_text("deep-block", extra=nested))
    put(
        "very-deep", skill_text("very-deep", extra="notes: " + "[" * 200_000 + "]" * 200_000 + "\n")
    )
    dup = skill_text("dup-keys", extra="verification:\n  tiers: [gpu]\n  asserts: other\n")
    put("dup-keys", dup + VERIFY)
    put("empty-snippet", skill_text("empty-snippet") + "\n```python verify\n# TODO\n\n```\n")
    late_nul = skill_text("late-nul", body="x" * 9000 + "\x00 hidden") + VERIFY
    put("late-nul", late_nul)
    put("cr-only", (skill_text("cr-only") + VERIFY).replace("\n", "\r"))
    # issue #28: dates YAML reads as timestamps but no calendar has, and a 1.2 KB alias bomb
    put("bad-date", skill_text("bad-date").replace("date: 2026-11-01", "date: 2026-13-45") + VERIFY)
    bad_time = skill_text("bad-time").replace("date: 2026-11-01", "date: 2026-11-01T25:61:00")
    put("bad-time", bad_time + VERIFY)
    put("alias-bomb", skill_text("alias-bomb", extra=ALIAS_BOMB) + VERIFY)
    (outside / "escaped").mkdir(parents=True)
    (outside / "escaped" / "SKILL.md").write_text(skill_text("escaped") + VERIFY)
    os.symlink(outside / "escaped", skills / "escaped")
    return {
        "deep-flow": "nests deeper than 32 levels",
        "deep-block": "nests deeper than 32 levels",
        "very-deep": "nests deeper than 32 levels",
        "dup-keys": "key 'verification' is given twice (lines",
        "empty-snippet": "block has no code",
        "late-nul": "NUL byte at offset",
        "cr-only": "bare CR",
        "escaped": "outside the knowledge-base root",
        "bad-date": "not a valid date",
        "bad-time": "not a valid date",
        "alias-bomb": "aliases expand",
    }


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    expected = _hostile(root, tmp_path_factory.mktemp("outside"))
    return root, expected


def _by_skill(problems: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in problems:
        out.setdefault(Path(p["path"]).parent.name, []).append(p)
    return out


def test_lint_names_each_bad_file_and_line_and_passes_the_good_one(hostile):
    root, expected = hostile
    res = CliRunner().invoke(app, ["lint", "--root", str(root), "--json"])
    assert res.exit_code == 1, res.output
    found = _by_skill(json.loads(res.stdout)["problems"])
    assert GOOD not in found
    for name, message in expected.items():
        assert name in found, f"{name} was not reported: {found}"
        assert any(message in p["message"] for p in found[name]), found[name]
        assert all(set(p) == {"path", "line", "field", "code", "message"} for p in found[name])
    dup = found["dup-keys"][0]
    assert dup["code"] == "duplicate-key" and dup["line"] > 10
    assert found["deep-flow"][0]["line"] > 1 and found["empty-snippet"][0]["line"] > 20


def test_deep_cards_are_refused_without_killing_the_index(hostile):
    from kbase.ingest.card_format import CardError, split_card

    for depth in (5000, 200_000):
        with pytest.raises(CardError, match="nests deeper"):
            split_card("---\nrepo: x\ntags: " + "[" * depth + "]" * depth + "\n---\nbody\n")
    with pytest.raises(CardError, match="aliases expand") as err:
        split_card("---\nrepo: x\n" + ALIAS_BOMB + "---\nbody\n")
    assert err.value.line > 2
    for when in ("2026-13-45", "2026-01-02T25:61:00"):
        with pytest.raises(CardError, match="not a valid date") as err:
            split_card(f"---\nrepo: x\ndate: {when}\n---\nbody\n")
        assert err.value.line == 3


def test_index_search_check_serve_and_mcp_keep_working(hostile):
    from mcp import Client

    from kbase.api import KnowledgeBase
    from kbase.serve.http_app import create_app
    from kbase.serve.mcp_server import build_server
    from kbase.serve.service import Service

    root, expected = hostile
    kb = KnowledgeBase(root=root, home=root / ".kbase", chroma_url="")
    rep = kb.index()
    assert rep.entries == 1
    reported = {Path(p.path).parent.name for p in rep.problems}
    assert reported == set(expected)
    assert [h.id for h in kb.search("zebracorn warp shuffle", k=3)] == [GOOD]

    res = CliRunner().invoke(app, ["index", "--root", str(root), "--json"])
    assert res.exit_code == 1 and json.loads(res.stdout)["entries"] == 1
    res = CliRunner().invoke(app, ["search", "zebracorn", "--root", str(root), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["hits"][0]["id"] == GOOD
    res = CliRunner().invoke(app, ["check", "deep-flow", "dup-keys", "--root", str(root)])
    assert res.exit_code == 1 and "nests deeper" in res.stdout and "given twice" in res.stdout

    service = Service(kb)
    service.prepare(index_if_missing=False, warm=False)
    with ThreadedUvicorn(create_app(service)) as srv:
        get = {
            route: httpx.get(f"{srv.url}{route}", params=params, timeout=60)
            for route, params in [
                ("/search", {"q": "zebracorn"}),
                ("/stale", {}),
                ("/list", {}),
                (f"/entries/{GOOD}", {}),
                ("/healthz", {}),
            ]
        }
    assert all(r.status_code == 200 for r in get.values()), {k: r.text for k, r in get.items()}
    assert [h["id"] for h in get["/search"].json()["hits"]] == [GOOD]
    assert [s["skill"] for s in get["/stale"].json()["skills"]] == [GOOD]
    assert GOOD in get["/list"].text and get[f"/entries/{GOOD}"].json()["id"] == GOOD
    health = get["/healthz"].json()
    assert health["degraded"] == len(rep.problems) >= len(expected)
    assert any(p.startswith("skills/bad-date/SKILL.md:") for p in health["problems"])

    async def mcp_search():
        async with Client(build_server(service)) as c:
            return await c.call_tool("search", {"query": "zebracorn"})

    out = anyio.run(mcp_search)
    assert not out.is_error and GOOD in out.content[0].text


@pytest.mark.parametrize("levels", [33, 999, 1000, 5000])
@pytest.mark.parametrize("flow", [True, False])
def test_depth_is_named_by_kbase_whatever_the_yaml_parser_refuses_first(levels, flow):
    """libyaml (PyYAML >= 6.0.4) refuses 1,000 levels with its own message, older ones crash or
    pass: either way kbase's own error must name the line where nesting passes 32 levels."""
    from kbase.ingest.markdown import MAX_DEPTH, YamlProblem, load_yaml

    if flow:
        text = "a: 1\nnotes: " + "[" * levels + "]" * levels + "\n"
        line = 2
    else:
        text = "a: 1\nnotes:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, levels))
        text += " " * levels + "v: 1\n"
        line = MAX_DEPTH + 2  # the top mapping is level 1, k1 (line 3) level 2, ...
    with pytest.raises(YamlProblem) as err:
        load_yaml(text, "x.yaml", first_line=1)
    (problem,) = err.value.problems
    assert problem.code == "too-deep" and "nests deeper than 32 levels" in problem.message
    assert problem.line == line
