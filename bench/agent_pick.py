#!/usr/bin/env python3
"""Does an agent pick the fixing skill from what kbase shows it? (issue #25, "let the agent choose
well"). The real-problem test half (bench/realprobs.yaml), shown to blind agents (one helper agent
per chunk of ~44 problems, told to read nothing but its input) in one of three ways:

- `mcp`: the answer of the MCP `search` tool (defaults: k 5, max_chars 6000, skills only), as a
  real MCP client over stdio receives it: hits, `candidates`, `no_good_match`;
- `mcpB`: the same from a variant that dropped the hits below the top three before shortening
  the candidate lines (commit c360217f; reverted: no gain, see docs/agents.md);
- `catalog`: every skill's id and description and nothing else, which is what the issue's
  outside measurement gave its agent (about 80 % first-pick on covered problems).

    python bench/agent_pick.py packets --out DIR [--half test] [--chunks 4] [--name mcp]
    python bench/agent_pick.py score [--picks bench/agent_picks] [--json]

`packets` writes DIR/{mcp,catalog}-N.json (problem keys p001..., shuffled, no URL, no label) for
the agents, DIR/shown-{mode}.json (the ids each answer showed) and DIR/key.json (which key is
which problem: not for the agents). Each agent writes DIR/picks-{mode}-N.json: {"p001": {"pick":
"<id>" or "none", "why": "..."}}. The picks of 2026-12-07 (skills at 445a4ec3) are kept in
bench/agent_picks/ like the set's own judgements; `score` counts them against the judged fixing
skills: first pick right on covered problems, "none" on uncovered and on covered ones, and, for
the MCP modes, why a wrong pick was wrong (the fixing skill not shown, or another one chosen).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realprobs as R  # noqa: E402
from common import REPO, write_result  # noqa: E402


def _problems(half: str) -> list[R.RealProblem]:
    return [p for p in R.load(REPO / "bench" / "realprobs.yaml") if p.half == half]


async def _mcp_answers(root: Path, home: Path, queries: list[str]) -> list[str]:
    from mcp import Client, StdioServerParameters

    env = {"KBASE_HOME": str(home), "PATH": "/usr/bin:/bin"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "kbase.cli", "mcp", "--root", str(root)], env=env
    )
    out = []
    async with Client(params, read_timeout_seconds=300) as c:
        for q in queries:
            res = await c.call_tool("search", {"query": q, "kind": "skill"})
            out.append(res.content[0].text)
    return out


def _catalog() -> list[dict[str, str]]:
    """Every skill's id and description (what the recorded catalog agents read), by the project's
    own skill loader."""
    from kbase.ingest.skills import find_skill_files, load_skill

    skills = [load_skill(f, REPO) for f in find_skill_files(REPO)]
    return [{"id": s.meta.name, "description": s.meta.description} for s in skills]


def packets(out: Path, half: str, chunks: int, name: str) -> None:
    import anyio

    probs = _problems(half)
    random.Random(25).shuffle(probs)
    keys = {f"p{i + 1:03d}": p.id for i, p in enumerate(probs)}
    work = out / "kb"
    shutil.rmtree(work, ignore_errors=True)
    (work / "pr_archive").mkdir(parents=True)
    shutil.copytree(REPO / "skills", work / "skills")
    subprocess.run(
        [sys.executable, "-m", "kbase.cli", "index", "--root", str(work)],
        env={"KBASE_HOME": str(out / "home"), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    answers = anyio.run(_mcp_answers, work, out / "home", [p.query for p in probs])
    catalog = _catalog()
    (out / "key.json").write_text(json.dumps(keys, indent=1))
    items = list(zip(keys, probs, answers, strict=True))
    packed = [{"key": k, "search_answer": json.loads(a)} for k, _, a in items]
    (out / f"shown-{name}.json").write_text(json.dumps(_shown(packed), separators=(",", ":")))
    for n in range(chunks):
        part = items[n::chunks]
        mcp = [{"key": k, "query": p.query, "search_answer": json.loads(a)} for k, p, a in part]
        (out / f"{name}-{n}.json").write_text(json.dumps(mcp, indent=1, ensure_ascii=False))
        if name != "mcp":
            continue  # another checkout's MCP answers beside the first run's
        cat = {"skills": catalog, "problems": [{"key": k, "query": p.query} for k, p, _ in part]}
        (out / f"catalog-{n}.json").write_text(json.dumps(cat, indent=1, ensure_ascii=False))
    print(f"{len(probs)} problems, {chunks} chunks per mode -> {out}")


def _figures(rows: list[tuple[R.RealProblem, str, list[str] | None]]) -> dict[str, float | int]:
    """rows: (problem, pick, the ids the agent was shown, or None for the whole catalog)."""
    cov = [r for r in rows if r[0].expected]
    unc = [r for r in rows if not r[0].expected]
    out: dict[str, float | int] = {
        "covered": len(cov),
        "uncovered": len(unc),
        "first_pick_right": round(sum(k in p.expected for p, k, _ in cov) / max(len(cov), 1), 4),
        "none_on_uncovered": round(sum(k == "none" for _, k, _ in unc) / max(len(unc), 1), 4),
        "not_none_on_covered": round(sum(k != "none" for _, k, _ in cov) / max(len(cov), 1), 4),
    }
    shown = [(p, k, ids) for p, k, ids in cov if ids is not None and k not in p.expected]
    if shown:
        out["wrong_fix_not_shown"] = sum(not set(ids) & set(p.expected) for p, _, ids in shown)
        out["wrong_other_chosen"] = len(shown) - int(out["wrong_fix_not_shown"])
    return out


def _shown(answers: list[dict]) -> dict[str, list[str]]:
    """The ids each MCP answer showed the agent: its hits, then its candidates."""
    return {
        x["key"]: [h["id"] for h in x["search_answer"]["hits"]]
        + [c["id"] for c in x["search_answer"]["candidates"]]
        for x in answers
    }


def score(picks_dir: Path, as_json: bool) -> None:
    keys = json.loads((picks_dir / "key.json").read_text())
    by_id = {p.id: p for half in ("tune", "test") for p in _problems(half)}
    modes = sorted({f.name.split("-")[1] for f in picks_dir.glob("picks-*-*.json")})
    result: dict[str, dict] = {}
    for mode in modes:
        picks: dict[str, str] = {}
        for f in sorted(picks_dir.glob(f"picks-{mode}-*.json")):
            picks.update({k: v["pick"] for k, v in json.loads(f.read_text()).items()})
        f = picks_dir / f"shown-{mode}.json"  # the packets are large: only their ids are kept
        shown = json.loads(f.read_text()) if f.exists() else {}
        rows = [(by_id[keys[k]], picks[k], shown.get(k)) for k in keys if k in picks]
        repos = sorted({p.repo for p, _, _ in rows})
        per_repo = {r: _figures([row for row in rows if row[0].repo == r]) for r in repos}
        result[mode] = {"all": _figures(rows), "per_repo": per_repo}
        result[mode]["missing"] = sorted(set(keys) - set(picks))
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        for mode, r in result.items():
            print(f"{mode:8} {json.dumps(r['all'])}")
        print("first pick right per repository (five or more covered problems):")
        for repo, f in result[modes[0]]["per_repo"].items():
            if int(f["covered"]) >= 5:
                cells = " ".join(
                    f"{m} {result[m]['per_repo'][repo]['first_pick_right']:.2f}" for m in modes
                )
                print(f"  {repo:34s} n={f['covered']:>3}  {cells}")
    write_result("agent_pick", result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("packets")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--half", default="test", choices=("tune", "test"))
    a.add_argument("--chunks", type=int, default=4)
    a.add_argument(
        "--name", default="mcp", help="file prefix of the MCP answers (catalog: only with mcp)"
    )
    b = sub.add_parser("score")
    b.add_argument("--picks", type=Path, default=REPO / "bench" / "agent_picks")
    b.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.cmd == "packets":
        packets(args.out, args.half, args.chunks, args.name)
    else:
        score(args.picks, args.json)


if __name__ == "__main__":
    main()
