"""The seams: one façade, one definition of each closed set, one error family, one query model."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import anyio
import httpx
import pytest
from serve_fixtures import ThreadedUvicorn, synthetic_skill
from typer.testing import CliRunner

from kbase import closed_sets as C
from kbase.errors import InvalidArgument, KbaseError, ProblemsError

REPO = Path(__file__).resolve().parents[1]
# The façade (kbase/api*.py) and what it is built from in kbase/ (the schema package, and the
# drafts a proposal writes) may import the internals; every other module of kbase/ is an
# adapter or a leaf, found by walking the folder, so a new module is checked without a list.
FACADE = {"api.py", "drafts.py"}
ADAPTERS = sorted(
    p
    for p in (REPO / "kbase").rglob("*.py")
    if not (p.name in FACADE or p.name.startswith("api_") or "schema" in p.parts)
)


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("path", ADAPTERS, ids=lambda p: str(p.relative_to(REPO)))
def test_adapters_reach_the_internals_only_through_the_facade(path):
    # the walk found the CLI, HTTP, MCP and export modules
    assert {"cli.py", "core.py", "http_app.py", "mcp_server.py", "export.py"} <= {
        p.name for p in ADAPTERS
    }
    inner = {
        m
        for m in _imports(path)
        if m.split(".")[:2]
        in (["kbase", "ingest"], ["kbase", "retrieval"], ["kbase", "validators"])
    }
    assert not inner, f"{path.name} imports {sorted(inner)}; go through kbase.api instead"


def test_every_deliberate_exception_is_a_kbase_error():
    import kbase

    found = []
    for pkg in ("kbase", "kbase.ingest", "kbase.retrieval", "kbase.validators", "kbase.serve"):
        mod = importlib.import_module(pkg)
        for info in pkgutil.iter_modules(mod.__path__, pkg + "."):
            if info.name.endswith(("mcp_server", "http_app")):
                continue  # import optional servers' SDKs; their errors are the SDKs'
            m = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(m, inspect.isclass):
                if cls.__module__ == m.__name__ and issubclass(cls, Exception):
                    found.append(cls)
    assert len(found) >= 10
    strays = [f"{c.__module__}.{c.__name__}" for c in found if not issubclass(c, KbaseError)]
    assert not strays, strays
    carriers = [c for c in found if "problems" in inspect.signature(c.__init__).parameters]
    assert carriers and all(issubclass(c, ProblemsError) for c in carriers)
    assert kbase.__version__


def test_each_closed_set_is_defined_once_and_in_one_severity_order():
    from kbase.validators import rules

    assert rules.ORDER == C.STATUS_ORDER and rules.BAD == C.BAD_VERDICTS
    assert C.STATUS_ORDER[0] == "failing" and C.STATUS_ORDER[-1] == "verified"
    # the tier Literal of the schema is the registry's
    from kbase.schema import Verification

    with pytest.raises(ValueError, match="cpu-interpret"):
        Verification(tiers=["tpu"], asserts="x")
    # no module spells a tier list or the status order out again
    spelled = []
    for path in [*REPO.glob("kbase/**/*.py"), *REPO.glob("validators/*.py")]:
        if path.name == "closed_sets.py":
            continue
        text = path.read_text()
        if '"cpu-interpret", "cpu-compile", "gpu"' in text or '"stale-env", "stale-age"' in text:
            spelled.append(str(path.relative_to(REPO)))
    assert not spelled, spelled


def test_the_html_report_and_the_rules_survive_a_tier_they_do_not_know():
    import datetime as dt

    from kbase.validators.report import html_report
    from kbase.validators.rules import SkillFacts, judge

    row = {
        "skill": "s",
        "snippet_sha256": "abc",
        "tier": "tpu",  # written by a newer kbase
        "verdict": "pass",
        "at": "2026-11-30T00:00:00+00:00",
        "fingerprint": {},
    }
    facts = SkillFacts("s", ["tpu"], "abc", dt.date(2026, 11, 1))
    j = judge(facts, [row], now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    assert j.status == "verified"
    page = html_report(
        [j.model_dump()],
        {"s": [row]},
        {"s": "abc"},
        {"s": 180},
        now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        fingerprint={},
        isolation_note=None,
        problems=[],
    )
    assert "tpu" in page


@pytest.fixture
def tiny_root(tmp_path):
    skill = tmp_path / "skills" / "tiny-skill"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(synthetic_skill("tiny-skill", "warp shuffles"))
    return tmp_path


BAD = [
    ({"status": ["verifed"]}, "status must be one of"),
    ({"k": 0}, "k must be between 1 and 50"),
    ({"kind": "bogus"}, "kind must be one of skill, pr"),
    ({"since": "last week"}, "since must be a date"),
    ({"mode": "fuzzy"}, "mode must be one of hybrid, bm25, dense"),
    ({"tags": ["archs"]}, "tag filter must look like key=value"),
]


@pytest.mark.parametrize("bad, message", BAD, ids=[m for _, m in BAD])
def test_the_same_bad_search_value_gets_the_same_message_everywhere(tiny_root, bad, message):
    from kbase.api import KnowledgeBase
    from kbase.cli import app
    from kbase.serve.http_app import create_app
    from kbase.serve.mcp_server import build_server
    from kbase.serve.service import Service

    kb = KnowledgeBase(root=tiny_root, home=tiny_root / ".kbase")
    with pytest.raises(InvalidArgument) as api_err:
        kb.search("warp", **bad)
    expected = str(api_err.value)
    assert message in expected

    # CLI (in process): exit 2, the message on stderr, the same problem in --json
    flag = {"status": "--status", "k": "-k", "kind": "--kind", "since": "--since", "mode": "--mode"}
    key, value = next(iter(bad.items()))
    args = ["search", "warp", "--root", str(tiny_root), "--json"]
    for v in value if isinstance(value, list) else [value]:
        args += [flag.get(key, "--tag"), str(v)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert expected in res.stderr
    problem = json.loads(res.stdout)["problems"][0]
    assert problem["message"] == expected and problem["field"] == key
    assert set(problem) == {"path", "line", "field", "code", "message"}

    # HTTP, over a real server: 400 with the same message
    service = Service(kb)
    with ThreadedUvicorn(create_app(service)) as srv:
        params = [("q", "warp")] + [
            ("tag" if key == "tags" else key, v)
            for v in (value if isinstance(value, list) else [value])
        ]
        r = httpx.get(f"{srv.url}/search", params=params, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"] == expected

    # MCP, through a real client session: an error result with the same message
    async def mcp_call():
        from mcp import Client

        async with Client(build_server(service)) as c:
            return await c.call_tool("search", {"query": "warp", **bad})

    out = anyio.run(mcp_call)
    assert out.is_error and expected in out.content[0].text


def test_facade_answers_list_stale_history_health_with_schema_models(tiny_root):
    from kbase.api import KnowledgeBase
    from kbase.schema import EntrySummary, Health, HistoryResult, StaleReport

    kb = KnowledgeBase(root=tiny_root, home=tiny_root / ".kbase")
    listed = kb.list()
    assert [type(x) for x in listed] == [EntrySummary] and listed[0].id == "tiny-skill"
    stale = kb.stale()
    assert isinstance(stale, StaleReport) and [s.skill for s in stale.skills] == ["tiny-skill"]
    assert stale.skills[0].status == "unverified" and stale.counts == {"unverified": 1}
    hist = kb.history("demo", "attention")
    assert isinstance(hist, HistoryResult) and not hist.available and hist.prs == []
    health = kb.health()
    assert isinstance(health, Health) and not health.ok and health.generation is None
    with pytest.raises(KeyError, match="no entry with id 'nope'"):
        kb.get("nope")


def test_cli_get_of_a_file_that_broke_after_indexing_is_an_error_not_a_traceback(tiny_root):
    from kbase.api import KnowledgeBase
    from kbase.cli import app

    kb = KnowledgeBase(root=tiny_root, home=tiny_root / ".kbase")
    kb.index()
    (tiny_root / "skills" / "tiny-skill" / "SKILL.md").write_bytes(b"\xff\xfe broken")
    res = CliRunner().invoke(app, ["get", "tiny-skill", "--root", str(tiny_root)])
    assert res.exit_code == 1 and "cannot be read now" in res.stderr
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_the_argument_checks_load_without_the_search_stack():
    import subprocess
    import sys

    code = (
        "import sys, kbase.serve.params, kbase.schema, kbase.api; "
        "heavy = [m for m in ('numpy', 'torch', 'chromadb', 'fastapi', 'mcp') "
        "if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
