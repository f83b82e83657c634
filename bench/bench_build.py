#!/usr/bin/env python3
"""Index build throughput: N PR cards mined from the shared histories, indexed into a fresh home.

    python bench/bench_build.py [--n 2000] [--device cpu|cuda] [--work DIR]

Mines the four histories (bench/devset_kb.py) unless --work already holds them, then builds an
index of the first N cards (the four archives interleaved) from scratch and prints entries/s and
embedded chunks/s, model load excluded and reported apart. Writes bench/results/build*.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402
from devset_kb import mine_archives  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=2000, help="entries to index")
    ap.add_argument("--device", default="cpu", help="torch device for the embedding model")
    ap.add_argument(
        "--work", type=Path, default=None, help="folder with (or for) the mined archives"
    )
    args = ap.parse_args()

    from kbase.ingest.cards import load_card_entries
    from kbase.retrieval.embed import get_embedder
    from kbase.retrieval.indexer import build_index, dense_chunks

    from kbase.config import default_model_path

    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-build-"))
    root = work / "kb"
    if not (root / "pr_archive").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        mine_archives(work, root)
        print(f"replayed and mined in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    cards, _ = load_card_entries(root)
    by_repo: dict[str, list] = {}
    for e in cards:
        by_repo.setdefault(e.repo or "", []).append(e)
    mixed = [e for group in zip(*by_repo.values(), strict=False) for e in group]
    mixed += [e for g in by_repo.values() for e in g[len(mixed) // max(1, len(by_repo)) :]]
    chosen = mixed[: args.n]

    t = time.perf_counter()
    emb = get_embedder(default_model_path(), args.device)
    emb.embed(["warm up the kernels"])
    load_s = time.perf_counter() - t
    empty_root = work / "empty-root"
    (empty_root / "skills").mkdir(parents=True, exist_ok=True)
    home = work / f"home-{args.device.replace(':', '_')}-{args.n}"
    shutil.rmtree(home, ignore_errors=True)
    t = time.perf_counter()
    rep = build_index(empty_root, home, lambda: emb, extra_entries=chosen)
    took = time.perf_counter() - t
    chunks = sum(len(dense_chunks(e)) for e in chosen)
    res = {
        "device": args.device,
        "entries": rep.entries,
        "embedded_chunks": rep.embedded_chunks,
        "dense_chunks": chunks,
        "model_load_s": round(load_s, 2),
        "build_s": round(took, 2),
        "entries_per_s": round(rep.entries / took, 1),
        "embedded_chunks_per_s": round(rep.embedded_chunks / max(rep.seconds["embed"], 1e-9), 1),
        "stages_s": rep.as_dict()["seconds"],
    }
    print(
        f"{res['entries']} entries in {res['build_s']} s on {args.device}: "
        f"{res['entries_per_s']} entries/s ({res['embedded_chunks']} chunks embedded, "
        f"{res['embedded_chunks_per_s']} chunks/s in the embed stage); "
        f"model load {res['model_load_s']} s; stages {res['stages_s']}"
    )
    name = "build" if args.device == "cpu" else f"build-{args.device.replace(':', '_')}"
    out = write_result(name, res)
    print(f"wrote {out}", file=sys.stderr)
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
