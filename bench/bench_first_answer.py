"""First answer from a fresh clone, the way the README tells a user to get one (issue #27).

    python bench/bench_first_answer.py            # everything below, once
    python bench/bench_first_answer.py --json     # the figures as JSON only

1. `git clone` of this repository's HEAD, then `uv tool install <clone>` (the README's torch-free
   install) into an empty tool folder with an empty uv cache: wall time and size on disk.
2. In the clone (no index yet): the first `kbase search ... --json` with that install, wall time
   including the index build of the shipped corpus; its stderr must announce the build and carry
   no triton `nanobind` line. Then a second search.
3. MCP `initialize` with that install on another fresh copy (bench_handshake's raw client).
4. A skill added to the clone afterwards is found by the next search (its trigger text, rank).
5. `kbase new` to a passing `kbase check --changed` with the contributor install (this
   interpreter's: torch and triton present), the author's writing replaced by a copy of a small
   shipped skill under the new name: the tools' own time.
JSON in bench/results/first_answer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_handshake  # noqa: E402
from bench_install import du  # noqa: E402
from common import REPO, write_result  # noqa: E402

QUERY = "illegal memory access in the last block"
ADDED = "zz-bench-added-skill"
ADDED_TRIGGER = "quokka wavefront desynchronised after the ninth barrier"
# a skill whose snippet runs on cpu-interpret in seconds: the stand-in for the author's text
TEMPLATE = "triton-masked-tail-pow2-block"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = sh(cmd, **kw)
    return time.perf_counter() - t0, r


def clean_env(**extra: str) -> dict[str, str]:
    # as a user's shell has it: no kbase settings, bytecode written for what a run imports
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KBASE_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    return {**env, **extra}


def install(tmp: Path, clone: Path) -> tuple[dict, Path]:
    env = clean_env(
        UV_TOOL_DIR=str(tmp / "tools"),
        UV_TOOL_BIN_DIR=str(tmp / "bin"),
        UV_CACHE_DIR=str(tmp / "uv-cache"),
    )
    secs, r = timed(["uv", "tool", "install", "--python", "3.11", str(clone)], env=env)
    if r.returncode != 0:
        raise SystemExit(f"uv tool install failed:\n{r.stderr[-3000:]}")
    return {
        "install_s": round(secs, 1),
        "size_mb": round(du(tmp / "tools") / 2**20, 1),
    }, tmp / "bin"


def search(kbase: Path, root: Path, query: str) -> dict:
    secs, r = timed([str(kbase), "search", query, "--json", "-k", "5"], cwd=root, env=clean_env())
    hits = [h["id"] for h in json.loads(r.stdout)["hits"]] if r.returncode == 0 else []
    return {
        "rc": r.returncode,
        "wall_s": round(secs, 2),
        "top": hits[:3],
        "hits": hits,
        "stderr_lines": len(r.stderr.splitlines()),
        "announces_build": bool(re.search(r"building the index", r.stderr)),
        "nanobind": "nanobind" in r.stderr,
    }


def add_skill(root: Path) -> None:
    src = (root / "skills" / TEMPLATE / "SKILL.md").read_text()
    dst = root / "skills" / ADDED / "SKILL.md"
    dst.parent.mkdir(parents=True)
    text = src.replace(TEMPLATE, ADDED).replace(
        "trigger:\n", f'trigger:\n  - "{ADDED_TRIGGER}"\n', 1
    )
    dst.write_text(text)


def new_to_check(root: Path) -> dict:
    """`kbase new`, the author's edit (a copy of TEMPLATE under the new name), `check --changed`."""
    name = "zz-bench-new-skill"
    kb = [sys.executable, "-m", "kbase.cli"]
    t0 = time.perf_counter()
    new = sh(kb + ["new", name, "--root", str(root)], env=clean_env())
    t_new = time.perf_counter() - t0
    src = (root / "skills" / TEMPLATE / "SKILL.md").read_text()
    (root / "skills" / name / "SKILL.md").write_text(src.replace(TEMPLATE, name))
    secs, chk = timed(
        kb + ["check", "--changed", "--root", str(root), "--json"], cwd=root, env=clean_env()
    )
    return {
        "new_rc": new.returncode,
        "check_rc": chk.returncode,
        "new_s": round(t_new, 2),
        "check_s": round(secs, 1),
        "total_s": round(t_new + secs, 1),
        "check_tail": chk.stderr.strip().splitlines()[-1:] if chk.returncode else [],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbase-first-") as t:
        tmp = Path(t)
        clone = tmp / "clone"
        sh(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        inst, bindir = install(tmp, clone)
        kbase = bindir / "kbase"
        first = search(kbase, clone, QUERY)
        second = search(kbase, clone, QUERY)
        bench_handshake.KBASE = [str(kbase)]
        init_s, tools_s = bench_handshake.raw_start(bench_handshake.fresh_root(tmp), early=True)
        add_skill(clone)
        added = search(kbase, clone, ADDED_TRIGGER)
        # the bytecode those runs wrote (uv writes none at install time)
        inst["size_after_runs_mb"] = round(du(tmp / "tools") / 2**20, 1)
        fresh = tmp / "contrib"
        sh(["git", "clone", "-q", str(REPO), str(fresh)], check=True)
        contrib = new_to_check(fresh)
    result = {
        "install": inst,
        "first_search": first,
        "second_search": second,
        "mcp_initialize_s": round(init_s, 2),
        "mcp_tools_list_s": round(tools_s, 2),
        "added_skill_rank": added["hits"].index(ADDED) + 1 if ADDED in added["hits"] else None,
        "added_search_s": added["wall_s"],
        "new_to_check": contrib,
        "load_1min": os.getloadavg()[0],
        "cores": os.cpu_count(),
    }
    write_result("first_answer", result)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"uv tool install: {inst['install_s']} s, {inst['size_mb']} MB "
        f"({inst['size_after_runs_mb']} MB after the runs below)\n"
        f"first search (index build included): {first['wall_s']} s, rc {first['rc']}, "
        f"top {first['top'][:1]}, announced {first['announces_build']}, "
        f"nanobind {first['nanobind']}\n"
        f"second search: {second['wall_s']} s\n"
        f"MCP initialize: {result['mcp_initialize_s']} s "
        f"(tools/list {result['mcp_tools_list_s']} s)\n"
        f"added skill: rank {result['added_skill_rank']} in {added['wall_s']} s\n"
        f"kbase new -> check --changed: {contrib['total_s']} s (rc new {contrib['new_rc']}, "
        f"check {contrib['check_rc']})\n"
        f"load {result['load_1min']:.1f} on {result['cores']} cores"
    )


if __name__ == "__main__":
    main()
