"""`kbase export --format agent-skills`: every exported file checked by a strict, independent
validator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from serve_fixtures import copy_skills

from kbase import KnowledgeBase

NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
ALLOWED = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}


def links(markdown: str) -> list[str]:
    """Link and image targets as a Markdown parser sees them (code spans are not links)."""
    from markdown_it import MarkdownIt

    out = []
    for tok in MarkdownIt("commonmark").parse(markdown):
        for child in tok.children or []:
            if child.type == "link_open":
                out.append(child.attrs.get("href", ""))
            elif child.type == "image":
                out.append(child.attrs.get("src", ""))
    return out


def validate_skill_dir(d: Path, target: str) -> list[str]:
    """Problems with one exported folder, per the Agent Skills format (and Codex's sidecar)."""
    problems = []
    text = (d / "SKILL.md").read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return [f"{d.name}: no front-matter"]
    head, _, body = text[4:].partition("\n---\n")
    fm = yaml.safe_load(head)
    if not isinstance(fm, dict):
        return [f"{d.name}: front-matter is not a mapping"]
    extra = set(fm) - ALLOWED
    if extra:
        problems.append(f"{d.name}: keys outside the format: {sorted(extra)}")
    name = fm.get("name")
    if not (isinstance(name, str) and NAME.match(name) and len(name) <= 64 and name == d.name):
        problems.append(f"{d.name}: bad name {name!r}")
    desc = fm.get("description")
    if not (isinstance(desc, str) and 0 < len(desc) <= 1024):
        problems.append(f"{d.name}: description missing or longer than 1024")
    if "compatibility" in fm and not (
        isinstance(fm["compatibility"], str) and 0 < len(fm["compatibility"]) <= 500
    ):
        problems.append(f"{d.name}: compatibility not a string of 1..500 characters")
    if "license" in fm and not isinstance(fm["license"], str):
        problems.append(f"{d.name}: license not a string")
    if "allowed-tools" in fm and not isinstance(fm["allowed-tools"], str):
        problems.append(f"{d.name}: allowed-tools must be a space-separated string")
    md = fm.get("metadata", {})
    if not isinstance(md, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in md.items()
    ):
        problems.append(f"{d.name}: metadata must map strings to strings: {md!r}")
    if not body.strip():
        problems.append(f"{d.name}: empty body")
    for target_path in links(body):
        if re.match(r"^[a-z]+://", target_path) or target_path.startswith("#"):
            continue
        if not (d / target_path.split("#")[0]).is_file():
            problems.append(f"{d.name}: body links to missing file {target_path}")
    oa = d / "agents" / "openai.yaml"
    if target == "codex":
        # Codex's own rules (issue #27): no compatibility key, no angle brackets in descriptions
        if "compatibility" in fm:
            problems.append(f"{d.name}: codex refuses the compatibility key")
        if isinstance(desc, str) and ("<" in desc or ">" in desc):
            problems.append(f"{d.name}: codex refuses < or > in the description")
        if not oa.is_file():
            problems.append(f"{d.name}: codex export without agents/openai.yaml")
        else:
            spec = yaml.safe_load(oa.read_text())
            iface = spec.get("interface", {})
            if not all(
                isinstance(iface.get(k), str) and iface[k]
                for k in ("display_name", "short_description", "default_prompt")
            ):
                problems.append(f"{d.name}: openai.yaml interface incomplete")
            if not 1 <= len(iface.get("short_description", "")) <= 64:
                problems.append(f"{d.name}: short_description longer than 64")
            if not isinstance(spec.get("policy", {}).get("allow_implicit_invocation"), bool):
                problems.append(f"{d.name}: policy.allow_implicit_invocation not a boolean")
    elif oa.exists():
        problems.append(f"{d.name}: agents/openai.yaml in a non-codex export")
    return problems


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("exportkb")
    copy_skills(r, n=5)
    return r


def _skill_dirs(dest: Path) -> list[Path]:
    return sorted(p for p in dest.iterdir() if p.is_dir())


@pytest.mark.parametrize("target", ["claude", "codex"])
def test_export_all_is_valid_agent_skills(root, tmp_path, target):
    from kbase.ingest.skills import load_skill

    from kbase.serve.export import ROUTER

    dest = tmp_path / "out"
    rep = KnowledgeBase(root=root).export(dest, target=target, include_all=True)
    dirs = _skill_dirs(dest)
    names = sorted(p.name for p in (root / "skills").iterdir())
    assert sorted(d.name for d in dirs) == sorted(names + [ROUTER]) and not rep.skipped
    problems = [p for d in dirs for p in validate_skill_dir(d, target)]
    assert not problems, problems
    assert all((dest / f).is_file() for f in rep.files)

    for name in names:
        src = load_skill(root / "skills" / name / "SKILL.md", root)
        out = (dest / name / "SKILL.md").read_text()
        fm = yaml.safe_load(out[4:].partition("\n---\n")[0])
        assert fm["metadata"]["kbase-status"] in (
            "verified",
            "failing",
            "stale-age",
            "stale-env",
            "stale-source",
            "unverified",
        )
        # trigger, steps and failure modes are in the body, not in the front-matter
        assert (
            src.meta.steps[0].split()[0] in out and src.meta.failure_modes[0].fix.split()[0] in out
        )
        assert "## When to use" in out and "## Steps" in out and "## Failure modes" in out
        # the snippet moved to scripts/, and nothing of it stays in the body as a verify block
        scripts = sorted(p.name for p in (dest / name / "scripts").iterdir())
        assert scripts and (
            "verify.py" in scripts
            or "verify.cu" in scripts
            or any(s.endswith(".cu") for s in scripts)
        )
        assert not re.search(r"^```\S*\s+verify\b", out, re.M)
        if "verify.py" in scripts:
            py = "".join(
                b.code
                for b in src.snippet_blocks()
                if b.lang.lower() in ("python", "py", "python3")
            )
            assert (dest / name / "scripts" / "verify.py").read_text().strip() == py.strip()


def test_default_export_is_the_router_only_and_it_teaches_kbase(root, tmp_path):
    from kbase.serve.export import ROUTER

    dest = tmp_path / "out"
    KnowledgeBase(root=root).export(dest, target="codex", mcp_url="http://127.0.0.1:9000/mcp")
    assert [d.name for d in _skill_dirs(dest)] == [ROUTER]
    assert not validate_skill_dir(dest / ROUTER, "codex")
    body = (dest / ROUTER / "SKILL.md").read_text()
    assert "kbase search" in body and "--json" in body and "MCP" in body
    for name in (p.name for p in (root / "skills").iterdir()):
        assert f"`{name}`" in body  # the catalog lives in the body, not in the runtime's skill list
    sidecar = yaml.safe_load((dest / ROUTER / "agents" / "openai.yaml").read_text())
    tool = sidecar["dependencies"]["tools"][0]
    assert tool["type"] == "mcp" and tool["url"] == "http://127.0.0.1:9000/mcp"


def test_export_refuses_to_overwrite_foreign_folders_but_replaces_its_own(root, tmp_path):
    from kbase.serve.export import ROUTER, ExportError

    dest = tmp_path / "out"
    KnowledgeBase(root=root).export(dest)
    KnowledgeBase(root=root).export(dest)  # a re-export replaces what we wrote
    (dest / "mine").mkdir()
    (dest / ROUTER / ".kbase-export").unlink()
    with pytest.raises(ExportError, match="not written by kbase export"):
        KnowledgeBase(root=root).export(dest)
    assert (dest / "mine").is_dir()


def test_cli_export_json(root, tmp_path):
    out = run_cli(
        "export", str(tmp_path / "o"), "--all", "--target", "codex", "--root", str(root), "--json"
    )
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["target"] == "codex" and len(rep["skills"]) == 6
    bad = run_cli("export", str(tmp_path / "p"), "--format", "zip", "--root", str(root))
    assert bad.returncode == 2 and "agent-skills" in bad.stderr


def test_export_dates_statuses_and_names_the_root(root, tmp_path):
    from datetime import datetime

    from kbase.serve.export import ROUTER

    dest = tmp_path / "out"
    rep = KnowledgeBase(root=root).export(dest, target="codex", include_all=True)
    when = datetime.fromisoformat(rep.exported_at)
    assert when.tzinfo is not None
    router = (dest / ROUTER / "SKILL.md").read_text()
    fm = yaml.safe_load(router[4:].partition("\n---\n")[0])
    assert fm["metadata"]["kbase-exported-at"] == rep.exported_at
    assert f"Statuses as of the export ({rep.exported_at})" in router
    assert f"--root {root.resolve()}" in router  # the CLI lines work from any folder
    assert "pip install kbase" not in router.replace("never `pip install kbase`", "")
    tool = yaml.safe_load((dest / ROUTER / "agents" / "openai.yaml").read_text())
    assert tool["dependencies"]["tools"][0]["command"] == f"kbase mcp --root {root.resolve()}"
    name = sorted(p.name for p in (root / "skills").iterdir())[0]
    skill = (dest / name / "SKILL.md").read_text()
    sfm = yaml.safe_load(skill[4:].partition("\n---\n")[0])
    assert sfm["metadata"]["kbase-exported-at"] == rep.exported_at
    assert f"as of the export at {rep.exported_at}" in skill


def test_codex_export_of_every_shipped_skill_passes_codex_rules_and_list_budget(tmp_path):
    """The shipped skills' descriptions use <= and <<<>>>: Codex's copy must not (issue #27).
    And Codex's list of the skills it may pick by itself, one "- name: description (file:
    path)" line each, fits its budget (8,000 characters with the context window unknown,
    kbase/serve/export.py): the issue found the --all export ~9x over it."""
    from serve_fixtures import REPO

    from kbase.serve.export import CODEX_LIST_BUDGET, ROUTER

    dest = tmp_path / "o"
    KnowledgeBase(root=REPO).export(dest, target="codex", include_all=True)
    dirs = _skill_dirs(dest)
    assert len(dirs) > 100
    problems = [p for d in dirs for p in validate_skill_dir(d, "codex")]
    assert not problems, problems[:5]

    def line(d: Path) -> str:
        fm = yaml.safe_load((d / "SKILL.md").read_text().partition("\n---\n")[0][4:])
        return f"- {fm['name']}: {fm['description']} (file: {d / 'SKILL.md'})\n"

    def implicit(d: Path) -> bool:
        spec = yaml.safe_load((d / "agents" / "openai.yaml").read_text())
        return spec.get("policy", {}).get("allow_implicit_invocation", True)

    listed = [line(d) for d in dirs if implicit(d)]
    assert sum(map(len, listed)) <= CODEX_LIST_BUDGET, listed
    assert sum(len(line(d)) for d in dirs) > 3 * CODEX_LIST_BUDGET  # why only the router is
    router = (dest / ROUTER / "SKILL.md").read_text()
    linked = {t.split("/")[1] for t in links(router) if t.startswith("../")}
    assert linked == {d.name for d in dirs} - {ROUTER}  # every other skill is one read away
