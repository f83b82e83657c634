#!/usr/bin/env python3
"""A large index built from the shared histories, and warm search latency on it (issue #11).

    python bench/bench_scale.py [--entries 100000] [--work DIR] [--n 60]

The four histories are mined once (bench/devset_kb.py) into PR cards; the cards are repeated
under new ids (`~1`, `~2`, ... with PR numbers offset by 100000 per copy) until the index holds
--entries entries, plus the shipped skills. The index is built by the real `build_index`
(Chroma upserts, vector files, BM25), with one difference: embeddings come from a cache of
unique texts in bench/.cache (gitignored), filled on the first run by ONNX Runtime, since a copy
has the same text as its original. The build time is reported but is not embedding throughput
(bench/bench_build.py measures that).

Warm latency through the Python API, every query text unseen (no query-embedding cache hit):
unfiltered, kind=pr repo=X, kind=skill, and a tag filter. Writes bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, latency_args, question_pool, warm_latency, write_result  # noqa: E402
from devset_kb import mine_archives  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

CACHE = REPO / "bench" / ".cache"
OFFSET = 100_000


_PR_NUMBER = re.compile(r"#(\d+)")


class CachedEmbedder:
    """Embedder interface over a persistent cache of (text, max_length) -> vector."""

    def __init__(self, inner_factory, path: Path):
        import numpy as np

        self._np = np
        self._inner_factory = inner_factory
        self._inner = None
        self.path = path
        self.vecs: dict[str, object] = {}
        if path.is_file():
            data = np.load(path)
            self.vecs = dict(zip(data["keys"].tolist(), data["vecs"], strict=True))
        self.loaded = len(self.vecs)
        self.full_length = 256
        self.misses = 0
        self.embed_s = 0.0

    @staticmethod
    def key(text: str, max_length: int | None) -> str:
        # A copy's text differs from its original's only in the PR number (offset by OFFSET per
        # copy; retrieval/build_stages.py keeps the number in what is embedded): it gets the
        # original's vector, or every copy would be embedded anew.
        text = _PR_NUMBER.sub(lambda m: f"#{int(m.group(1)) % OFFSET}", text)
        return hashlib.sha1(f"{max_length or 0}\0{text}".encode()).hexdigest()

    def embed(self, texts, batch_size=None, max_length=None):
        np = self._np
        keys = [self.key(t, max_length) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self.vecs]
        if todo:
            if self._inner is None:
                self._inner = self._inner_factory()
            t = time.perf_counter()
            got = self._inner.embed([texts[i] for i in todo], max_length=max_length)
            self.embed_s += time.perf_counter() - t
            self.misses += len(todo)
            for i, v in zip(todo, got, strict=True):
                self.vecs[keys[i]] = np.asarray(v, dtype=np.float32)
        return np.stack([self.vecs[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        np = self._np
        if len(self.vecs) == self.loaded:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp.npz")
        keys = list(self.vecs)
        np.savez(tmp, keys=np.asarray(keys), vecs=np.stack([self.vecs[k] for k in keys]))
        os.replace(tmp, self.path)


def repeated(cards: list, target: int) -> list:
    """`target` PR entries: the cards (the archives interleaved, so a small run has every
    repo), then copies under new ids and offset PR numbers."""
    by_repo: dict[str, list] = {}
    for e in cards:
        by_repo.setdefault(e.repo or "", []).append(e)
    longest = max((len(g) for g in by_repo.values()), default=0)
    cards = [g[i] for i in range(longest) for g in by_repo.values() if i < len(g)]
    out = list(cards[:target])
    copy = 0
    while len(out) < target:
        copy += 1
        for e in cards:
            if len(out) >= target:
                break
            ne = e.model_copy(deep=True)
            ne.id = f"{e.id}~{copy}"
            ne.path = f"{e.path}~{copy}"
            if ne.pr is not None:
                ne.pr = ne.pr + copy * OFFSET
            ne.content_hash = hashlib.sha256(f"{e.content_hash}~{copy}".encode()).hexdigest()
            for c in ne.chunks:
                c.entry_id = ne.id
                c.id = f"{ne.id}::{c.id.rsplit('::', 1)[-1]}"
            out.append(ne)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", type=int, default=100_000, help="PR entries in the index")
    ap.add_argument("--work", type=Path, default=None, help="folder for replays, cards, index")
    latency_args(ap, 60)
    ap.add_argument(
        "--reuse", action="store_true", help="keep an index built by an earlier run (re-index)"
    )
    args = ap.parse_args()

    import shutil

    from common import load_card_entries
    from kbase.retrieval.onnx_embed import OnnxDocEmbedder, materialize

    from kbase.api import KnowledgeBase
    from kbase.config import default_model_path

    console = Console(width=140)
    work = args.work or Path(tempfile.gettempdir()) / "kbase-scale"
    mined = work / "mined"
    if not (mined / "pr_archive").is_dir():
        t = time.perf_counter()
        mine_archives(work, mined)
        console.print(f"replayed and mined in {time.perf_counter() - t:.1f}s")
    cards, _ = load_card_entries(mined)
    entries = repeated(cards, args.entries)
    root = work / "root"
    if not (root / "skills").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(REPO / "skills", root / "skills")
    home = work / f"home-{args.entries}"
    if not args.reuse:
        shutil.rmtree(home, ignore_errors=True)

    model = default_model_path()
    onnx_home = work / "onnx-home"

    def inner():
        return OnnxDocEmbedder(materialize(onnx_home))

    cache = CachedEmbedder(inner, CACHE / f"scale-{Path(model).name}.npz")
    from kbase.retrieval.indexer import build_index

    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 15 or done == total:
            last[0] = time.perf_counter()
            print(f"  {stage} {done}/{total}", file=sys.stderr, flush=True)

    t = time.perf_counter()
    try:
        # --reuse: the build finds everything unchanged (a no-op re-index at this size)
        rep = build_index(root, home, lambda: cache, extra_entries=entries, progress=progress)
    finally:
        cache.save()
    build_s = time.perf_counter() - t
    # Queries go through the shipped model, as after `kbase index`.
    materialize(onnx_home)
    shutil.copytree(onnx_home / "onnx", home / "onnx", dirs_exist_ok=True)
    kb = KnowledgeBase(root=root, home=home)
    res = {
        "reused_index": args.reuse,
        "entries": rep.entries,
        "chunks": rep.chunks,
        "build_s": round(build_s, 1),
        "build_stages_s": rep.as_dict()["seconds"],
        "embedded_now": cache.misses,
        "embed_s_for_cache_misses": round(cache.embed_s, 1),
        "query_embedder": type(kb.query_embedder()).__name__,
        "load_avg_1m_before_warm": round(os.getloadavg()[0], 2),
        "warm": warm_latency(kb, question_pool()[::-1], args.n, args.repo, args.tag),
        "load_avg_1m_after_warm": round(os.getloadavg()[0], 2),
    }
    t = Table(
        title=f"warm latency, {rep.entries} entries, unseen query texts", title_justify="left"
    )
    cols = ("case", "p50 ms", "p95 ms", "p50 thread CPU ms", "p50 process CPU ms")
    for col in (*cols, "p50 / unfiltered", "target"):
        t.add_column(col)
    for name, r in res["warm"].items():
        target = "" if name == "embedding alone" else "p50 <= 25 ms"
        t.add_row(
            name,
            f"{r['p50_ms']:.1f}",
            f"{r['p95_ms']:.1f}",
            f"{r['p50_thread_cpu_ms']:.1f}",
            f"{r['p50_process_cpu_ms']:.1f}",
            str(r["vs_unfiltered_p50"]),
            target,
        )
    console.print(t)
    console.print(
        f"load average (1 min) {res['load_avg_1m_before_warm']} before the timed searches, "
        f"{res['load_avg_1m_after_warm']} after"
    )
    console.print(
        f"built in {res['build_s']} s (stages {res['build_stages_s']}); "
        f"{cache.misses} texts embedded now, the rest from {cache.path.name}"
    )
    name = "scale" if args.entries == 100_000 else f"scale-{args.entries}"
    out = write_result(name + ("-rerun" if args.reuse else ""), res)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
