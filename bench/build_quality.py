"""Retrieval quality of the index settings of bench/bench_build.py --quality (precision, PR token
limit, PR sections left to BM25): each setting indexes the dev-set knowledge base
(bench/devset_kb.py: skills + the four mined archives) into its own home and is scored on both
halves of both dev sets (bench/bench_devsets.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def with_settings(
    env: dict[str, str], pr_max_tokens: int | None = None, lexical_only: list[str] | None = None
) -> Iterator[None]:
    """Index with these environment variables (KBASE_INDEX_PRECISION ...), PR token limit and
    PR sections left to BM25 alone (chunk_ids.LEXICAL_ONLY_SECTIONS)."""
    from kbase.retrieval import build_stages as CI
    from kbase.retrieval import indexer as IX

    saved = {k: os.environ.get(k) for k in env}
    saved_limit, saved_lex = IX.PR_MAX_TOKENS, CI.LEXICAL_ONLY_SECTIONS
    os.environ.update(env)
    if pr_max_tokens is not None:
        IX.PR_MAX_TOKENS = pr_max_tokens
    if lexical_only is not None:
        CI.LEXICAL_ONLY_SECTIONS = frozenset(lexical_only)
    try:
        yield
    finally:
        IX.PR_MAX_TOKENS, CI.LEXICAL_ONLY_SECTIONS = saved_limit, saved_lex
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# Index settings compared on the dev sets (issue #11): name -> evaluate_settings spec. "from":
# start from that setting's home (its skill vectors have the same recipe).
INT8 = {"KBASE_INDEX_PRECISION": "int8"}
SETTINGS: dict[str, dict] = {
    "fp32-128": {"env": {"KBASE_INDEX_PRECISION": "fp32"}},  # before
    "int8-128": {"env": INT8},  # the default now
    "int8-64": {"env": INT8, "pr_max_tokens": 64, "from": "int8-128"},
    "fp32-no-description": {
        "env": {"KBASE_INDEX_PRECISION": "fp32"},
        "from": "fp32-128",
        "lexical_only": ["files", "symbols", "description"],
    },
    "int8-no-description": {
        "env": INT8,
        "from": "int8-128",
        "lexical_only": ["files", "symbols", "description"],
    },
}


def evaluate_settings(
    work: Path,
    variants: dict[str, dict],
    base_home: Path | None = None,
    recompute: bool = False,
) -> dict[str, dict]:
    """variants: name -> {"env": {...}, "pr_max_tokens": N or None}, each indexed by the real
    `KnowledgeBase.index()` into its own home, a copy of base_home when given (vectors whose
    recipe is the same are reused, not embedded again). Returns name -> {index_s, process_cpu_s,
    embedded_chunks, dense, scores}. A variant already scored in work/quality-NAME.json is read
    back (the dev-set index takes minutes per variant on a shared 2-core machine)."""
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_devsets import run
    from kbase.retrieval import generations as G

    from kbase.api import KnowledgeBase

    root = work / "kb"
    if not (root / "pr_archive").is_dir():
        raise SystemExit(f"{root} holds no mined archives (bench/devset_kb.py mines them)")
    shutil.rmtree(root / "skills", ignore_errors=True)
    shutil.copytree(REPO / "skills", root / "skills")
    out: dict[str, dict] = {}
    for name, spec in variants.items():
        done = work / f"quality-{name}.json"
        if done.is_file() and not recompute:
            out[name] = json.loads(done.read_text())
            continue
        home = work / f"quality-home-{name}"
        if not home.exists() and base_home is not None and not spec.get("from"):
            shutil.copytree(base_home, home, symlinks=True)
        if not home.exists() and spec.get("from"):
            shutil.copytree(work / f"quality-home-{spec['from']}", home, symlinks=True)
        with with_settings(
            spec.get("env", {}), spec.get("pr_max_tokens"), spec.get("lexical_only")
        ):
            kb = KnowledgeBase(root=root, home=home)
            t, c = time.perf_counter(), time.process_time()
            rep = kb.index()
            took, cpu = time.perf_counter() - t, time.process_time() - c
            kb = KnowledgeBase(root=root, home=home)
            kb.warm_up()
            scores = run(kb, modes=("hybrid", "bm25", "dense"))
            gen = G.load_generation(home)
        out[name] = {
            "spec": spec,
            "index_s": round(took, 1),
            "process_cpu_s": round(cpu, 1),
            "embedded_chunks": rep.embedded_chunks,
            "backend": rep.backend,
            "dense": gen.meta.get("dense") if gen is not None else None,
            "scores": scores,
        }
        done.write_text(json.dumps(out[name], indent=1))
        print(f"quality {name}: indexed in {took:.0f}s", file=sys.stderr, flush=True)
    return out


def summary_rows(res: dict[str, dict]) -> list[tuple[str, str, str, str]]:
    """(variant, set/half, mode, 'Hit@1 / Hit@5 / MRR') rows for a table."""
    rows = []
    for name, r in res.items():
        for set_name, s in r["scores"]["sets"].items():
            for mode, per in s["modes"].items():
                for half in ("tune", "test"):
                    sc = per[half]
                    rows.append(
                        (
                            name,
                            f"{set_name}/{half}",
                            mode,
                            f"{sc['hit@1']:.3f} / {sc['hit@5']:.3f} / {sc['mrr']:.3f}",
                        )
                    )
    return rows
