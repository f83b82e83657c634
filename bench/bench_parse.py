"""Benchmark parse + lint of a large skills tree: skills per second (one process: a pool of two
measured 0.73-1.08x of one on 2 cores, 2,000 skills, so `kbase lint` has none).

    python bench/bench_parse.py [--skills 10000] [--repeats 1] [--stages 500]

The tree is generated in a temporary root from the shipped skills (each copied under new names
until there are --skills of them), so every file is a real, lint-clean SKILL.md. `kbase lint`
does exactly this work: read, split the front-matter, YAML, schema validation, Markdown blocks,
snippet checks, then the cross-skill checks. Target: >= 500 skills/s.
A stage split (one process, --stages files) shows where the time goes.
Prints a rich table; writes bench/results/bench_parse.json.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, write_result
from kbase.ingest.files import read_text
from kbase.ingest.markdown import parse_body, parse_yaml, split_front_matter
from kbase.ingest.skills import SKILL_FILE, find_skill_files, lint_paths
from rich.console import Console
from rich.table import Table

from kbase.schema import SkillMeta

TARGET = 500.0  # skills/s with 2 processes


def make_tree(dest: Path, n: int, source: Path) -> int:
    """n lint-clean skills under dest/skills, copies of the shipped ones under new names."""
    clean = {}
    for f in find_skill_files(source):
        if not lint_paths([f], source):  # a skill mid-edit is not a fair sample
            clean[f.parent.name] = f.read_text(encoding="utf-8")
    # keep only skills whose `related` skills are kept too, so the copies lint clean as a set
    while True:
        drop = {n for n, t in clean.items() if not _related(t) <= set(clean)}
        if not drop:
            break
        clean = {n: t for n, t in clean.items() if n not in drop}
    bases = sorted(clean.items())
    if not bases:
        raise SystemExit(f"no lint-clean skill under {source}/skills")
    for i in range(n):
        base, text = bases[i % len(bases)]
        name = base if i < len(bases) else f"{base}-{i}"
        if name != base:
            text = re.sub(r"^name: .*$", f"name: {name}", text, count=1, flags=re.M)
        folder = dest / "skills" / name
        folder.mkdir(parents=True)
        (folder / SKILL_FILE).write_text(text, encoding="utf-8")
    return len(bases)


def _related(text: str) -> set[str]:
    from kbase.ingest.markdown import parse_yaml, split_front_matter

    meta, _ = parse_yaml(split_front_matter(text, "x")[0], "x")
    return set(meta.get("related") or [])


def bench_lint(root: Path, repeats: int) -> dict:
    files = find_skill_files(root)
    best, best_cpu = float("inf"), float("inf")
    problems = 0
    for _ in range(repeats):
        c0 = _cpu()
        t0 = time.perf_counter()
        problems = len(lint_paths(files, root))
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, _cpu() - c0)
    return {
        "skills": len(files),
        "seconds": round(best, 3),
        "skills_per_s": round(len(files) / best, 1),
        # CPU time of this process: what the work costs whatever else runs here
        "cpu_seconds": round(best_cpu, 3),
        "skills_per_cpu_s": round(len(files) / best_cpu, 1),
        "problems": problems,
    }


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def bench_stages(root: Path, n: int) -> dict:
    """Seconds per stage over the first n files, in one process."""
    files = find_skill_files(root)[:n]
    t = {"read": 0.0, "split": 0.0, "yaml": 0.0, "schema": 0.0, "markdown": 0.0}
    for f in files:
        t0 = time.perf_counter()
        text = read_text(f, root)
        t1 = time.perf_counter()
        yaml_text, body, body_line = split_front_matter(text, str(f))
        t2 = time.perf_counter()
        meta, _node = parse_yaml(yaml_text, str(f))
        t3 = time.perf_counter()
        SkillMeta.model_validate(meta)
        t4 = time.perf_counter()
        parse_body(body, body_line)
        t5 = time.perf_counter()
        for k, a, b in (
            ("read", t0, t1),
            ("split", t1, t2),
            ("yaml", t2, t3),
            ("schema", t3, t4),
            ("markdown", t4, t5),
        ):
            t[k] += b - a
    total = sum(t.values())
    return {
        "files": len(files),
        "ms_per_skill": {k: round(v / len(files) * 1000, 3) for k, v in t.items()},
        "share": {k: round(v / total, 3) for k, v in t.items()},
    }


def bench_before_after(root: Path, n: int) -> dict:
    """The parse path of 8581300 (pure-Python YAML parsed twice, inline Markdown) against today's,
    over the same n files in this process: the speed-up measured side by side."""
    import yaml
    from markdown_it import MarkdownIt

    files = find_skill_files(root)[:n]
    texts = [(str(f), read_text(f, root)) for f in files]
    full_md = MarkdownIt("commonmark")

    def before(path: str, text: str) -> None:
        yaml_text, body, _ = split_front_matter(text, path)
        yaml.compose(yaml_text, Loader=yaml.SafeLoader)
        SkillMeta.model_validate(yaml.safe_load(yaml_text))
        full_md.parse(body)

    def after(path: str, text: str) -> None:
        yaml_text, body, body_line = split_front_matter(text, path)
        meta, _ = parse_yaml(yaml_text, path)
        SkillMeta.model_validate(meta)
        parse_body(body, body_line)

    out = {}
    for name, fn in (("before", before), ("after", after)):
        c0 = time.process_time()
        for path, text in texts:
            fn(path, text)
        cpu = time.process_time() - c0
        out[name] = {"cpu_seconds": round(cpu, 3), "skills_per_cpu_s": round(len(texts) / cpu, 1)}
    out["speedup"] = round(out["after"]["skills_per_cpu_s"] / out["before"]["skills_per_cpu_s"], 2)
    out["files"] = len(texts)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--skills", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=1, help="best of N runs per setting")
    ap.add_argument("--stages", type=int, default=500, help="files in the stage split")
    ap.add_argument("--source", default=str(REPO), help="root whose skills are copied")
    args = ap.parse_args()
    err = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="kbase-bench-parse-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        distinct = make_tree(root, args.skills, Path(args.source).resolve())
        err.print(
            f"generated {args.skills} skills from {distinct} in {time.perf_counter() - t0:.1f}s"
        )
        err.print("lint ...")
        runs = [bench_lint(root, args.repeats)]
        stages = bench_stages(root, args.stages)
        err.print("before/after parse path, side by side ...")
        versus = bench_before_after(root, args.stages)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = {
        "skills": args.skills,
        "distinct_sources": distinct,
        "cpus": cpus,
        "load_avg_1min": load,
        "runs": runs,
        "stages": stages,
        "before_after": versus,
        "target_skills_per_s": TARGET,
        "target_met": runs[0]["skills_per_s"] >= TARGET,
    }
    shown = f"{load:.1f}" if load is not None else "?"
    table = Table(title=f"kbase parse + lint, {args.skills} skills ({cpus} CPUs, load {shown})")
    for col in ("seconds", "skills/s", "skills/CPU-s", "problems"):
        table.add_column(col, justify="right")
    for r in runs:
        table.add_row(
            f"{r['seconds']:.2f}",
            f"{r['skills_per_s']:.0f}",
            f"{r['skills_per_cpu_s']:.0f}",
            str(r["problems"]),
        )
    Console().print(table)
    st = Table(title=f"where one process spends its time ({stages['files']} files)")
    for col in ("stage", "ms/skill", "share"):
        st.add_column(col, justify="right")
    for k, v in stages["ms_per_skill"].items():
        st.add_row(k, f"{v:.3f}", f"{stages['share'][k]:.0%}")
    Console().print(st)
    vt = Table(title=f"parse path before (8581300) and now, one process, {versus['files']} files")
    for col in ("path", "CPU s", "skills/CPU-s"):
        vt.add_column(col, justify="right")
    for k in ("before", "after"):
        vt.add_row(k, f"{versus[k]['cpu_seconds']:.2f}", f"{versus[k]['skills_per_cpu_s']:.0f}")
    vt.add_row("speed-up", "", f"{versus['speedup']:.2f}x")
    Console().print(vt)
    out = write_result("bench_parse", result)
    err.print(
        f"target >= {TARGET:.0f} skills/s: "
        f"{'met' if result['target_met'] else 'NOT met'} at load {shown}; wrote {out}"
    )
    return 0 if all(r["problems"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
