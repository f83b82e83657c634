#!/usr/bin/env python3
"""Index build throughput: N PR cards mined from the shared histories, indexed into a fresh home.

    python bench/bench_build.py [--n 2000] [--device cpu|cuda] [--work DIR]
        [--backends torch,onnx,onnx-int8,onnx-2threads,onnx-fulltext,onnx-int8@64]
        [--no-variants] [--quality [--quality-work DIR] [--quality-base HOME]]

Mines the four histories (bench/devset_kb.py) unless --work already holds them, then builds an
index of the first N cards (the four archives interleaved) from scratch with each embedding
backend in turn (on CPU: torch; ONNX Runtime fp32, int8 (retrieval/onnx_int8.py, the default),
fp32 on two intra-op threads one run at a time (as before), fp32 embedding each chunk's full text
(as before retrieval/dense_text.py); `@N` cuts PR chunks at N word pieces; side by side, same
cards), and prints entries/s (wall, and an idle estimate from the CPU seconds of the build's
processes spread over the cores), the embedder's CPU seconds apart, model load, ONNX export,
int8 conversion and chromadb's import excluded and reported apart, and how closely the
backends' vectors agree (cosine). Then (CPU, unless --no-variants) the embedding variants of
bench/build_variants.py on the same chunks: graph optimisation, int8, text recipe, token limit,
batch size; with --quality, Hit@1/Hit@5/MRR on both halves of both dev sets for each index
setting of build_quality.SETTINGS (precision, PR token limit, PR descriptions embedded or not),
each through `KnowledgeBase.index()` of the whole dev-set knowledge base.
Writes bench/results/build*.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_quality import (  # noqa: E402
    SETTINGS,
    evaluate_settings,
    legacy_text,
    summary_rows,
    with_settings,
    with_variant,
)
from build_variants import length_facts, make_graphs, run_variants  # noqa: E402
from common import children_cpu, cpu_info, write_result  # noqa: E402
from devset_kb import mine_archives  # noqa: E402

# (column header, row key) of the variants and lengths tables
VARIANT_COLS = (
    ("graph", "graph"),
    ("text", "text"),
    ("max tok", "max_tokens"),
    ("batch tok", "batch_tokens"),
    ("tokens", "tokens"),
    ("CPU s", "cpu_s"),
    ("wall s", "wall_s"),
    ("entries/s idle est", "entries_per_s_idle_est"),
    ("cos min", "cos_vs_torch_min"),
    ("cos mean", "cos_vs_torch_mean"),
)
LENGTH_COLS = (
    ("kind/text", "kind_text"),
    ("chunks", "chunks"),
    ("mean", "mean_tokens"),
    ("> 128", "over_128"),
    ("> 256", "over_256"),
    ("tok @128", "tokens_cut_at_128"),
    ("tok @256", "tokens_cut_at_256"),
)


def print_variants(variants: list[dict], quality: dict | None, lengths: dict | None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=160)

    def show(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        t = Table(title=title, title_justify="left")
        for col in header:
            t.add_column(col)
        for row in rows:
            t.add_row(*row)
        con.print(t)

    def keyed(cols: tuple, rows: list[dict]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
        return tuple(c for c, _ in cols), [tuple(str(r[k]) for _, k in cols) for r in rows]

    if variants:
        show(
            "embedding variants, same PR chunks (CPU s: this process; idle est = entries / "
            "(CPU s / cores)); cosine vs torch on the same texts",
            *keyed(VARIANT_COLS, variants),
        )
    if lengths:
        rows = [{"kind_text": k, **r} for k, r in lengths.items()]
        show("dense chunk lengths (word pieces), whole archive", *keyed(LENGTH_COLS, rows))
    if quality:
        show(
            "dev-set quality per variant: Hit@1 / Hit@5 / MRR",
            ("variant", "set/half", "mode", "score"),
            [tuple(r) for r in summary_rows(quality)],
        )


class CpuTimed:
    """The embedder, counting this process's CPU seconds inside embed() (the rest of the
    build's CPU time is parsing, Chroma and BM25)."""

    def __init__(self, inner: object):
        self._inner = inner
        self.cpu_s = 0.0
        if hasattr(inner, "embed_batches"):  # a GPU embedder's stream, timed the same way
            self.embed_batches = self._timed_batches

    def embed(self, *a, **kw):
        c = time.process_time()
        try:
            return self._inner.embed(*a, **kw)  # type: ignore[attr-defined]
        finally:
            self.cpu_s += time.process_time() - c

    def _timed_batches(self, batches):
        """The inner stream (embed.Embedder.embed_batches), counting the CPU seconds spent
        while this process waits for each batch's vectors."""
        it = self._inner.embed_batches(batches)  # type: ignore[attr-defined]
        while True:
            c = time.process_time()
            try:
                vecs = next(it)
            except StopIteration:
                return
            finally:
                self.cpu_s += time.process_time() - c
            yield vecs

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def save_sample(path: Path, entries: list, vecs: dict) -> None:
    """Chunk ids, the texts the build embedded and its vectors, every k-th chunk up to 2,000."""
    import numpy as np
    from kbase.retrieval import dense_text as DT
    from kbase.retrieval.indexer import dense_chunks

    pairs = [(e, c) for e in entries for c in dense_chunks(e) if c.id in vecs]
    pairs = pairs[:: max(1, len(pairs) // 2000)][:2000]
    np.savez_compressed(
        path,
        ids=np.asarray([c.id for _, c in pairs]),
        texts=np.asarray([DT.dense_text(e, c) for e, c in pairs]),
        kinds=np.asarray([e.kind for e, _ in pairs]),
        vectors=np.stack([vecs[c.id] for _, c in pairs]).astype(np.float32),
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=2000, help="entries to index")
    ap.add_argument("--device", default="cpu", help="torch device for the embedding model")
    ap.add_argument(
        "--backends",
        default="torch,onnx,onnx-int8,onnx-2threads,onnx-fulltext",
        help="comma list: torch, onnx (fp32), onnx-int8 (retrieval/onnx_int8.py), onnx-2threads "
        "(fp32, one run at a time on two intra-op threads, as before), onnx-fulltext (fp32, "
        "each chunk's full text as before retrieval/dense_text.py); all but torch CPU only",
    )
    ap.add_argument("--no-variants", action="store_true", help="skip the embedding variants table")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="build each backend this many times in this process (rows NAME, NAME#2, ...): "
        "several builds for one model load and one ONNX export",
    )
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
        "bench/vector_agreement.py (the fp16 copy on a GPU against fp32 on CPU)",
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
    from kbase.retrieval.onnx_export import ensure_onnx
    from kbase.retrieval.vector_files import GenVectors

    backends = [b for b in args.backends.split(",") if b]
    if args.device != "cpu":
        backends = ["torch"]
    t = time.perf_counter()
    emb = get_embedder(default_model_path(), args.device)
    emb.embed(["warm up the kernels"])
    load_s = time.perf_counter() - t
    onnx_load_s = None
    ox = None
    onnx_home = work / "onnx-export"
    # Every fresh home would export the ONNX query model (retrieval/onnx_query.py) on its first
    # build: a one-time cost whatever the size, measured here once and copied into each home.
    t = time.perf_counter()
    ensure_onnx(onnx_home, default_model_path(), emb)
    if any(b.startswith("onnx") for b in backends):
        ox = OnnxDocEmbedder(onnx_home / "onnx")
        ox.embed(["warm up the kernels"])
    onnx_load_s = time.perf_counter() - t
    int8_s = None
    onnx_by_backend: dict[str, object] = {"onnx": ox, "onnx-fulltext": ox}
    if "onnx-int8" in backends:
        from kbase.retrieval import onnx_int8 as Q

        t = time.perf_counter()
        Q.build_int8(onnx_home / "onnx")
        int8_s = time.perf_counter() - t
        ox8 = OnnxDocEmbedder(onnx_home / "onnx", model=Q.INT8_FILE, recipe=Q.RECIPE)
        ox8.embed(["warm up the kernels"])
        onnx_by_backend["onnx-int8"] = ox8
    if "onnx-2threads" in backends:
        onnx_by_backend["onnx-2threads"] = OnnxDocEmbedder(onnx_home / "onnx", threads=cores())
    # chromadb's import (seconds of CPU) is paid once per process, like the model load: apart, so
    # the first backend built is not charged for it
    t = time.perf_counter()
    import chromadb  # noqa: F401

    chroma_import_s = time.perf_counter() - t
    empty_root = work / "empty-root"
    (empty_root / "skills").mkdir(parents=True, exist_ok=True)
    chunks = sum(len(dense_chunks(e)) for e in chosen)
    runs: dict[str, dict] = {}
    vecs: dict[str, dict[str, np.ndarray]] = {}
    for spec, rerun in [(b, k) for b in backends for k in range(1, args.repeat + 1)]:
        # "backend@N": PR chunks cut at N word pieces instead of indexer.PR_MAX_TOKENS
        backend, _, cut = spec.partition("@")
        row = spec if rerun == 1 else f"{spec}#{rerun}"
        home = work / f"home-{backend}-{cut or 'x'}-{args.device.replace(':', '_')}-{args.n}"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        shutil.copytree(onnx_home / "onnx", home / "onnx")
        timed = CpuTimed(emb if backend == "torch" else onnx_by_backend[backend])
        entries = [e.model_copy(deep=True) for e in chosen]
        legacy = backend == "onnx-fulltext"
        with (
            with_variant(legacy_text if legacy else None, "legacy" if legacy else None, None),
            with_settings({}, int(cut) if cut else None),
        ):
            t = time.perf_counter()
            cpu0 = time.process_time() + children_cpu()
            rep = build_index(
                empty_root,
                home,
                lambda timed=timed: timed,
                extra_entries=entries,
                dense_model=getattr(timed, "recipe", ""),
            )
            took = time.perf_counter() - t
            cpu = time.process_time() + children_cpu() - cpu0
        gv = GenVectors(G.load_generation(home).path)
        vecs[spec] = {
            cid: np.asarray(gv.matrix(k)[i]) for k in gv.parts for i, cid in enumerate(gv.ids(k))
        }
        if args.save_vectors and backend == "torch":
            save_sample(args.save_vectors, entries, vecs[spec])
        runs[row] = {
            "entries": rep.entries,
            "embedded_chunks": rep.embedded_chunks,
            "build_s": round(took, 2),
            "process_cpu_s": round(cpu, 2),
            "entries_per_s": round(rep.entries / took, 1),
            # what the build would take on idle cores: its processes' CPU time spread over them
            "entries_per_s_idle_est": round(rep.entries / (cpu / cores()), 1),
            "embed_cpu_s": round(timed.cpu_s, 2),
            "other_cpu_s": round(cpu - timed.cpu_s, 2),
            "embedded_chunks_per_s": round(
                rep.embedded_chunks / max(rep.seconds["embed"], 1e-9), 1
            ),
            "stages_s": rep.as_dict()["seconds"],
        }
        shutil.rmtree(home, ignore_errors=True)
    agreement = None
    if "torch" in vecs and "onnx" in vecs:  # same text recipe
        common = sorted(set(vecs["torch"]) & set(vecs["onnx"]))
        cos = np.asarray([float(vecs["torch"][c] @ vecs["onnx"][c]) for c in common])
        agreement = {
            "vectors": len(common),
            "min_cosine": round(float(cos.min()), 6),
            "mean_cosine": round(float(cos.mean()), 6),
        }
    int8_agreement = None
    if "onnx" in vecs and "onnx-int8" in vecs:  # ids differ by the recipe tag: match the chunks

        def by_chunk(v: dict) -> dict:
            return {(i.split("::")[0], i.rsplit("::", 1)[-1]): x for i, x in v.items()}

        a, b = by_chunk(vecs["onnx"]), by_chunk(vecs["onnx-int8"])
        cos = np.asarray([float(a[c] @ b[c]) for c in sorted(set(a) & set(b))])
        int8_agreement = {
            "vectors": len(cos),
            "min_cosine": round(float(cos.min()), 6),
            "mean_cosine": round(float(cos.mean()), 6),
        }
    variants: list[dict] = []
    if args.device == "cpu" and not args.no_variants and "onnx" in backends:
        graphs = make_graphs(emb, onnx_home / "onnx", work / "onnx-variants")
        variants = run_variants(emb, graphs, chosen, cores())
    lengths = length_facts(cards, onnx_home / "onnx" / "tokenizer.json") if ox is not None else None
    quality = None
    if args.quality:
        quality = evaluate_settings(
            args.quality_work or work, SETTINGS, args.quality_base, recompute=False
        )
    res = {
        "variants": variants,
        "chunk_lengths_whole_archive": lengths,
        "quality": quality,
        "device": args.device,
        # KBASE_GPU_PRECISION: how the GPU computed the vectors (fp32 on a CPU)
        "precision": getattr(emb, "precision", "fp32"),
        "cores": cores(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "entries": len(chosen),
        "dense_chunks": chunks,
        "model_load_s": round(load_s, 2),
        "onnx_export_and_load_s": None if onnx_load_s is None else round(onnx_load_s, 2),
        "chromadb_import_s": round(chroma_import_s, 2),
        "int8_model_s": None if int8_s is None else round(int8_s, 2),
        "runs": runs,
        "torch_vs_onnx": agreement,
        "onnx_fp32_vs_int8": int8_agreement,
        "target_entries_per_s": 100 if args.device == "cpu" else 2000,
    }
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"index build, {len(chosen)} PR cards ({chunks} dense chunks), {args.device} "
        f"{res['precision']}, "
        f"{cores()} cores ({cpu_info()}), load {res['load_avg_1m_at_start']}",
        title_justify="left",
    )
    cols = (
        "backend",
        "build s",
        "CPU s",
        "embed CPU s",
        "entries/s",
        "entries/s idle est",
        "chunks/s (embed)",
    )
    # store s: the build's time in Chroma's inserts
    for col in (*cols, "embed s", "store s", "bm25+write s"):
        table.add_column(col)
    for b, r in runs.items():
        table.add_row(
            b,
            str(r["build_s"]),
            str(r["process_cpu_s"]),
            str(r["embed_cpu_s"]),
            str(r["entries_per_s"]),
            str(r["entries_per_s_idle_est"]),
            str(r["embedded_chunks_per_s"]),
            str(r["stages_s"].get("embed")),
            str(r["stages_s"].get("store")),
            str(r["stages_s"].get("bm25+write")),
        )
    Console(width=140).print(table)
    print(f"model load {res['model_load_s']} s; torch vs onnx vectors: {agreement}")
    print(f"ONNX fp32 vs int8 vectors: {int8_agreement}")
    print_variants(variants, quality, lengths)
    name = "build" if args.device == "cpu" else f"build-{args.device.replace(':', '_')}"
    out = write_result(name, res)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
