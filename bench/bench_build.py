#!/usr/bin/env python3
"""Index build throughput: N PR cards mined from the shared histories, indexed into a fresh home.

    python bench/bench_build.py [--n 2000] [--device cpu|cuda] [--work DIR]
        [--backends torch,onnx,onnx-int8,onnx-int8@64] [--repeat N]
        [--quality [--quality-work DIR] [--quality-base HOME]]

Mines the four histories (bench/devset_kb.py) unless --work already holds them, then builds an
index of the first N cards (the four archives interleaved) from scratch with each embedding
backend in turn (on CPU: torch; ONNX Runtime fp32 and int8 (retrieval/onnx_embed.py, the
default); `@N` cuts PR chunks at N word pieces; side by side, same cards), and prints entries/s
(wall, and an idle estimate from the CPU seconds of the build's processes spread over the
cores), the embedder's CPU seconds apart, model load, ONNX export, int8 conversion and
chromadb's import excluded and reported apart, and how closely the backends' vectors agree
(cosine). With --quality, Hit@1/Hit@5/MRR on both halves of both dev sets for each index setting
of build_quality.SETTINGS (precision, PR token limit, PR descriptions embedded or not), each
through `KnowledgeBase.index()` of the whole dev-set knowledge base.
Writes bench/results/build*.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_quality import SETTINGS, evaluate_settings, summary_rows, with_settings  # noqa: E402
from common import children_cpu, cpu_info, write_result  # noqa: E402
from devset_kb import mine_archives  # noqa: E402


class CpuTimed:
    """The embedder, counting this process's CPU seconds inside embed() (the rest of the
    build's CPU time is parsing, Chroma and BM25)."""

    def __init__(self, inner: object):
        self._inner = inner
        self.cpu_s = 0.0

    def embed(self, *a, **kw):
        c = time.process_time()
        try:
            return self._inner.embed(*a, **kw)  # type: ignore[attr-defined]
        finally:
            self.cpu_s += time.process_time() - c

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def save_sample(path: Path, entries: list, vecs: dict) -> None:
    """Chunk ids, the texts the build embedded and its vectors, every k-th chunk up to 2,000."""
    from kbase.retrieval import build_stages as DT

    pairs = [(e, c) for e in entries for c in DT.dense_chunks(e) if c.id in vecs]
    pairs = pairs[:: max(1, len(pairs) // 2000)][:2000]
    np.savez_compressed(
        path,
        ids=np.asarray([c.id for _, c in pairs]),
        texts=np.asarray([DT.dense_text(e, c) for e, c in pairs]),
        kinds=np.asarray([e.kind for e, _ in pairs]),
        vectors=np.stack([vecs[c.id] for _, c in pairs]).astype(np.float32),
    )


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=2000, help="entries to index")
    ap.add_argument("--device", default="cpu", help="torch device for the embedding model")
    # onnx (fp32) and onnx-int8 (retrieval/onnx_embed.py) on CPU only; NAME@N: PR chunks cut at N
    ap.add_argument("--backends", default="torch,onnx,onnx-int8", help="comma list of backends")
    # several builds for one model load and one ONNX export: rows NAME, NAME#2, ...
    ap.add_argument("--repeat", type=int, default=1, help="builds of each backend")
    ap.add_argument(
        "--quality",
        action="store_true",
        help="dev-set quality of the index settings of build_quality.SETTINGS (slow: indexes "
        "the dev-set knowledge base once per setting)",
    )
    ap.add_argument(
        "--work", type=Path, default=None, help="folder with (or for) the mined archives"
    )
    ap.add_argument(
        "--quality-work",
        type=Path,
        default=None,
        help="folder for --quality (default --work): kb/ with the mined archives and skills, one "
        "home per setting, and each setting's scores (quality-NAME.json, read back if there)",
    )
    ap.add_argument(
        "--quality-base",
        type=Path,
        default=None,
        help="an index home of the same kb/ to copy into each setting's home (vectors of the "
        "same recipe are taken over, not embedded again)",
    )
    ap.add_argument(
        "--save-vectors",
        type=Path,
        default=None,
        help="write up to 2,000 of the torch build's chunk vectors with their texts (.npz) for "
        "bench/vector_agreement.py (a GPU's vectors against the CPU's)",
    )
    return ap.parse_args()


def _cards(work: Path, n: int) -> list:
    """The first n PR cards of the mined archives, the repositories interleaved."""
    from common import load_card_entries

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
    return mixed[:n]


def _embedders(device: str, backends: list[str], onnx_home: Path) -> tuple[dict, dict]:
    """(backend -> embedder, seconds of the one-time steps: model load, ONNX export, int8)."""
    from kbase.retrieval.embed import get_embedder
    from kbase.retrieval.onnx_embed import OnnxDocEmbedder, materialize

    from kbase.config import default_model_path

    t = time.perf_counter()
    emb = get_embedder(default_model_path(), device)
    emb.embed(["warm up the kernels"])
    once = {"model_load_s": round(time.perf_counter() - t, 2)}
    # Every fresh home writes the shipped model (retrieval/onnx_embed.py) on its first build:
    # a one-time cost whatever the size, measured here once and copied into each home.
    t = time.perf_counter()
    materialize(onnx_home)
    by_backend: dict[str, object] = {"torch": emb}
    if "onnx" in backends:
        by_backend["onnx"] = OnnxDocEmbedder(onnx_home / "onnx")
        by_backend["onnx"].embed(["warm up the kernels"])  # type: ignore[attr-defined]
    once["onnx_write_and_load_s"] = round(time.perf_counter() - t, 2)
    if "onnx-int8" in backends:
        from kbase.retrieval import onnx_embed as Q

        t = time.perf_counter()
        Q.build_int8(onnx_home / "onnx")
        once["int8_model_s"] = round(time.perf_counter() - t, 2)
        ox8 = OnnxDocEmbedder(onnx_home / "onnx", model=Q.INT8_FILE, recipe=Q.RECIPE)
        ox8.embed(["warm up the kernels"])
        by_backend["onnx-int8"] = ox8
    # chromadb's import (seconds of CPU) is paid once per process, like the model load: apart, so
    # the first backend built is not charged for it
    t = time.perf_counter()
    import chromadb  # noqa: F401

    once["chromadb_import_s"] = round(time.perf_counter() - t, 2)
    return by_backend, once


def _build(spec: str, embedder: object, chosen: list, work: Path, home: Path) -> tuple[dict, dict]:
    """One build of the chosen cards into a fresh home: (its row, chunk id -> vector)."""
    from kbase.retrieval import generations as G
    from kbase.retrieval.indexer import build_index
    from kbase.retrieval.onnx_embed import cores
    from kbase.retrieval.vectors import GenVectors

    cut = spec.partition("@")[2]  # "backend@N": PR chunks cut at N word pieces
    empty_root = work / "empty-root"
    (empty_root / "skills").mkdir(parents=True, exist_ok=True)
    timed = CpuTimed(embedder)
    entries = [e.model_copy(deep=True) for e in chosen]
    with with_settings({}, int(cut) if cut else None):
        t = time.perf_counter()
        cpu0 = time.process_time() + children_cpu()
        rep = build_index(
            empty_root,
            home,
            lambda: timed,
            extra_entries=entries,
            dense_model=getattr(timed, "recipe", ""),
        )
        took = time.perf_counter() - t
        cpu = time.process_time() + children_cpu() - cpu0
    gv = GenVectors(G.load_generation(home).path)
    vecs = {cid: np.asarray(gv.matrix(k)[i]) for k in gv.parts for i, cid in enumerate(gv.ids(k))}
    row = {
        "entries": rep.entries,
        "embedded_chunks": rep.embedded_chunks,
        "build_s": round(took, 2),
        "process_cpu_s": round(cpu, 2),
        "entries_per_s": round(rep.entries / took, 1),
        # what the build would take on idle cores: its processes' CPU time spread over them
        "entries_per_s_idle_est": round(rep.entries / (cpu / cores()), 1),
        "embed_cpu_s": round(timed.cpu_s, 2),
        "other_cpu_s": round(cpu - timed.cpu_s, 2),
        "embedded_chunks_per_s": round(rep.embedded_chunks / max(rep.seconds["embed"], 1e-9), 1),
        "stages_s": rep.as_dict()["seconds"],
    }
    return row, vecs


def _agreement(vecs: dict[str, dict], one: str, other: str) -> dict | None:
    """Cosine of two builds' vectors of the same chunks (ids matched without the recipe tag)."""
    if one not in vecs or other not in vecs:
        return None

    def by_chunk(v: dict) -> dict:
        return {(i.split("::")[0], i.rsplit("::", 1)[-1]): x for i, x in v.items()}

    a, b = by_chunk(vecs[one]), by_chunk(vecs[other])
    cos = np.asarray([float(a[c] @ b[c]) for c in sorted(set(a) & set(b))])
    return {
        "vectors": len(cos),
        "min_cosine": round(float(cos.min()), 6),
        "mean_cosine": round(float(cos.mean()), 6),
    }


def _print(res: dict, chunks: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"index build, {res['entries']} PR cards ({chunks} dense chunks), {res['device']}, "
        f"{res['cores']} cores ({cpu_info()}), load {res['load_avg_1m_at_start']}",
        title_justify="left",
    )
    cols = ("backend", "build s", "CPU s", "embed CPU s", "entries/s", "entries/s idle est")
    # store s: the build's time in Chroma's inserts
    for col in (*cols, "chunks/s (embed)", "embed s", "store s", "bm25+write s"):
        table.add_column(col)
    for b, r in res["runs"].items():
        keys = ("build_s", "process_cpu_s", "embed_cpu_s", "entries_per_s")
        stages = [str(r["stages_s"].get(k)) for k in ("embed", "store", "bm25+write")]
        table.add_row(
            b,
            *(str(r[k]) for k in keys),
            str(r["entries_per_s_idle_est"]),
            str(r["embedded_chunks_per_s"]),
            *stages,
        )
    con = Console(width=140)
    con.print(table)
    print(f"model load {res['model_load_s']} s; torch vs onnx vectors: {res['torch_vs_onnx']}")
    print(f"ONNX fp32 vs int8 vectors: {res['onnx_fp32_vs_int8']}")
    if res["quality"]:
        q = Table(title="dev-set quality per setting: Hit@1 / Hit@5 / MRR", title_justify="left")
        for col in ("setting", "set/half", "mode", "score"):
            q.add_column(col)
        for row in summary_rows(res["quality"]):
            q.add_row(*row)
        con.print(q)


def main() -> None:
    from kbase.retrieval.build_stages import dense_chunks
    from kbase.retrieval.onnx_embed import cores

    args = _args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-build-"))
    chosen = _cards(work, args.n)
    backends = [b for b in args.backends.split(",") if b] if args.device == "cpu" else ["torch"]
    onnx_home = work / "onnx-export"
    by_backend, once = _embedders(args.device, [b.partition("@")[0] for b in backends], onnx_home)
    runs: dict[str, dict] = {}
    vecs: dict[str, dict] = {}
    for spec, rerun in [(b, k) for b in backends for k in range(1, args.repeat + 1)]:
        backend = spec.partition("@")[0]
        home = work / f"home-{spec.replace('@', '-')}-{args.device.replace(':', '_')}-{args.n}"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        shutil.copytree(onnx_home / "onnx", home / "onnx")
        runs[spec if rerun == 1 else f"{spec}#{rerun}"], vecs[spec] = _build(
            spec, by_backend[backend], chosen, work, home
        )
        if args.save_vectors and backend == "torch":
            save_sample(args.save_vectors, chosen, vecs[spec])
        shutil.rmtree(home, ignore_errors=True)
    quality = None
    if args.quality:
        quality = evaluate_settings(
            args.quality_work or work, SETTINGS, args.quality_base, recompute=False
        )
    res = {
        "quality": quality,
        "device": args.device,
        "cores": cores(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "entries": len(chosen),
        "dense_chunks": sum(len(dense_chunks(e)) for e in chosen),
        **once,
        "runs": runs,
        "torch_vs_onnx": _agreement(vecs["torch"], vecs["onnx"])
        if {"torch", "onnx"} <= set(vecs)
        else None,
        "onnx_fp32_vs_int8": _agreement(vecs["onnx"], vecs["onnx-int8"])
        if {"onnx", "onnx-int8"} <= set(vecs)
        else None,
        "target_entries_per_s": 100 if args.device == "cpu" else 2000,
    }
    _print(res, res["dense_chunks"])
    name = "build" if args.device == "cpu" else f"build-{args.device.replace(':', '_')}"
    out = write_result(name, res)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
