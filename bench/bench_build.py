#!/usr/bin/env python3
"""Index build throughput: N PR cards mined from the shared histories, indexed into a fresh home.

    python bench/bench_build.py [--n 2000] [--device cpu|cuda] [--work DIR] [--backends torch,onnx]

Mines the four histories (bench/devset_kb.py) unless --work already holds them, then builds an
index of the first N cards (the four archives interleaved) from scratch with each embedding
backend in turn (on CPU: torch, then ONNX Runtime; side by side, same cards), and prints
entries/s and embedded chunks/s, model load and ONNX export excluded and reported apart, and how
closely the two backends' vectors agree (cosine). Writes bench/results/build*.json.
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


def _int8_trial(onnx_dir: Path, entries: list, fp32) -> dict:
    """Quantize the export's weights to int8 (dynamic), embed the same PR texts with both, and
    report speed (CPU time too) and cosine agreement. A trial only: kbase keeps fp32 vectors."""
    import numpy as np
    import onnx
    from kbase.retrieval.indexer import PR_MAX_TOKENS, dense_chunks
    from kbase.retrieval.onnx_embed import OnnxDocEmbedder
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = onnx_dir.parent / "onnx-int8"
    shutil.copytree(onnx_dir, out, dirs_exist_ok=True)
    quantize_dynamic(
        str(onnx_dir / "model.onnx"),
        str(out / "model.onnx"),
        weight_type=QuantType.QInt8,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    q = OnnxDocEmbedder(out)
    texts = [f"{e.title}\n{c.text}" for e in entries for c in dense_chunks(e)]
    row: dict = {"texts": len(texts)}
    vecs = {}
    for name, m in (("fp32", fp32), ("int8", q)):
        t, c = time.perf_counter(), time.process_time()
        vecs[name] = m.embed(texts, max_length=PR_MAX_TOKENS)
        row[f"{name}_s"] = round(time.perf_counter() - t, 2)
        row[f"{name}_cpu_s"] = round(time.process_time() - c, 2)
    cos = (vecs["fp32"] * vecs["int8"]).sum(axis=1)
    row["min_cosine"] = round(float(cos.min()), 4)
    row["mean_cosine"] = round(float(np.mean(cos)), 4)
    print(f"int8 trial: {row}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=2000, help="entries to index")
    ap.add_argument("--device", default="cpu", help="torch device for the embedding model")
    ap.add_argument("--backends", default="torch,onnx", help="comma list: torch, onnx (CPU only)")
    ap.add_argument(
        "--int8",
        action="store_true",
        help="also try ONNX Runtime dynamic int8 quantization (needs the onnx package): "
        "speed and cosine agreement with fp32 on the PR texts; never used by kbase index",
    )
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

    import os

    import numpy as np
    from kbase.retrieval import generations as G
    from kbase.retrieval.onnx_embed import OnnxDocEmbedder, cores
    from kbase.retrieval.onnx_query import ensure_onnx
    from kbase.retrieval.vector_files import GenVectors

    backends = [b for b in args.backends.split(",") if b]
    if args.device != "cpu":
        backends = ["torch"]
    t = time.perf_counter()
    emb = get_embedder(default_model_path(), args.device)
    emb.embed(["warm up the kernels"])
    load_s = time.perf_counter() - t
    onnx_load_s = None
    onnx_home = work / "onnx-export"
    if "onnx" in backends:
        t = time.perf_counter()
        ensure_onnx(onnx_home, default_model_path(), emb)
        ox = OnnxDocEmbedder(onnx_home / "onnx")
        ox.embed(["warm up the kernels"])
        onnx_load_s = time.perf_counter() - t
    empty_root = work / "empty-root"
    (empty_root / "skills").mkdir(parents=True, exist_ok=True)
    chunks = sum(len(dense_chunks(e)) for e in chosen)
    runs: dict[str, dict] = {}
    vecs: dict[str, dict[str, np.ndarray]] = {}
    for backend in backends:
        home = work / f"home-{backend}-{args.device.replace(':', '_')}-{args.n}"
        shutil.rmtree(home, ignore_errors=True)
        factory = (lambda: emb) if backend == "torch" else (lambda: ox)
        entries = [e.model_copy(deep=True) for e in chosen]
        t = time.perf_counter()
        cpu0 = time.process_time()
        rep = build_index(empty_root, home, factory, extra_entries=entries)
        took = time.perf_counter() - t
        cpu = time.process_time() - cpu0
        gv = GenVectors(G.load_generation(home).path)
        vecs[backend] = {
            cid: np.asarray(gv.matrix(k)[i]) for k in gv.parts for i, cid in enumerate(gv.ids(k))
        }
        runs[backend] = {
            "entries": rep.entries,
            "embedded_chunks": rep.embedded_chunks,
            "build_s": round(took, 2),
            "process_cpu_s": round(cpu, 2),
            "entries_per_s": round(rep.entries / took, 1),
            "embedded_chunks_per_s": round(
                rep.embedded_chunks / max(rep.seconds["embed"], 1e-9), 1
            ),
            "stages_s": rep.as_dict()["seconds"],
        }
        shutil.rmtree(home, ignore_errors=True)
    agreement = None
    if "torch" in vecs and "onnx" in vecs:
        common = sorted(set(vecs["torch"]) & set(vecs["onnx"]))
        cos = np.asarray([float(vecs["torch"][c] @ vecs["onnx"][c]) for c in common])
        agreement = {
            "vectors": len(common),
            "min_cosine": round(float(cos.min()), 6),
            "mean_cosine": round(float(cos.mean()), 6),
        }
    int8 = _int8_trial(onnx_home / "onnx", chosen, ox) if args.int8 and "onnx" in backends else None
    res = {
        "int8_trial": int8,
        "device": args.device,
        "cores": cores(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "entries": len(chosen),
        "dense_chunks": chunks,
        "model_load_s": round(load_s, 2),
        "onnx_export_and_load_s": None if onnx_load_s is None else round(onnx_load_s, 2),
        "runs": runs,
        "torch_vs_onnx": agreement,
        "target_entries_per_s": 100 if args.device == "cpu" else 2000,
    }
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"index build, {len(chosen)} PR cards ({chunks} dense chunks), {args.device}, "
        f"{cores()} cores, load {res['load_avg_1m_at_start']}",
        title_justify="left",
    )
    for col in ("backend", "build s", "entries/s", "chunks/s (embed)", "embed s", "bm25+write s"):
        table.add_column(col)
    for b, r in runs.items():
        table.add_row(
            b,
            str(r["build_s"]),
            str(r["entries_per_s"]),
            str(r["embedded_chunks_per_s"]),
            str(r["stages_s"].get("embed")),
            str(r["stages_s"].get("bm25+write")),
        )
    Console(width=140).print(table)
    print(f"model load {res['model_load_s']} s; torch vs onnx vectors: {agreement}")
    name = "build" if args.device == "cpu" else f"build-{args.device.replace(':', '_')}"
    out = write_result(name, res)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
