"""Index-time embedding variants for bench/bench_build.py, measured side by side on the same PR
chunks: ONNX graph (the shipped ORT-optimised export, onnxruntime's transformer optimizer with fused
attention, int8 weights for the FFN MatMuls only or for every MatMul), dense text recipe (the
chunk's full text or retrieval/dense_text.py), token limit and batch size.

Speed is CPU seconds of this process as well as wall seconds: on a shared 2-core machine the wall
clock mostly measures the neighbours, while CPU seconds / cores is what the build would take on
idle cores. Agreement is the cosine between a variant's vectors and the torch sentence-transformers
vectors of the same texts at the same limit.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

HEADS, HIDDEN = 12, 384  # all-MiniLM-L6-v2 (config.json of the packaged model)


def make_graphs(emb: Any, shipped: Path, out: Path) -> dict[str, Path]:
    """ONNX dirs for each graph variant (tokenizer and meta copied from the shipped export).
    Needs the `onnx` package for everything but the shipped graph."""
    graphs = {"ort-extended": shipped}
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as exc:
        print(f"graph variants skipped: {exc}")
        return graphs
    from kbase.retrieval import onnx_export as OX

    out.mkdir(parents=True, exist_ok=True)

    def folder(name: str) -> Path:
        d = out / name
        d.mkdir(exist_ok=True)
        for f in ("meta.json", "tokenizer.json"):
            shutil.copy2(shipped / f, d / f)
        return d

    fused = folder("fused") / "model.onnx"
    if not fused.is_file():
        # The transformer optimizer fuses attention only from the eager attention pattern; the
        # default (sdpa) export leaves attention as separate MatMul/Softmax nodes.
        am = emb.model[0].auto_model
        prev = am.config._attn_implementation
        am.set_attn_implementation("eager")
        try:
            OX._export_model(am, out / "raw-eager.onnx")
        finally:
            am.set_attn_implementation(prev)
        m = optimize_model(
            str(out / "raw-eager.onnx"),
            model_type="bert",
            num_heads=HEADS,
            hidden_size=HIDDEN,
            opt_level=0,
            use_gpu=False,
        )
        m.save_model_to_file(str(fused))
    graphs["fused"] = fused.parent
    extra = {"DefaultTensorType": onnx.TensorProto.FLOAT}

    def int8(name: str, ffn_only: bool) -> Path:
        """The fused graph with int8 weights for its FFN MatMuls, or for every MatMul."""
        out_model = folder(name) / "model.onnx"
        if out_model.is_file():
            return out_model
        nodes = None
        if ffn_only:
            g = onnx.load(str(fused), load_external_data=False)
            nodes = [
                n.name
                for n in g.graph.node
                if n.op_type == "MatMul"
                and ("/intermediate/" in n.name or "/output/dense" in n.name)
                and "/attention/" not in n.name
            ]
        quantize_dynamic(
            str(fused),
            str(out_model),
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_quantize=nodes,
            extra_options=extra,
        )
        return out_model

    graphs["fused-ffn-int8"] = int8("fused-ffn-int8", ffn_only=True).parent
    every = int8("fused-all-int8", ffn_only=False)
    graphs["fused-all-int8"] = every.parent
    return graphs


# (graph, text recipe, max tokens, batch tokens): the shipped default, then one lever at a time
PLAN = [
    ("ort-extended", "full", 128, 8192),  # before this work
    ("ort-extended", "full", 128, 1024),
    ("fused", "full", 128, 1024),
    ("ort-extended", "dense", 128, 8192),
    ("ort-extended", "dense", 128, 4096),
    ("ort-extended", "dense", 128, 2048),
    ("ort-extended", "dense", 128, 1024),  # the default now
    ("ort-extended", "dense", 128, 512),
    ("fused", "dense", 128, 1024),
    ("ort-extended", "dense", 96, 1024),
    ("ort-extended", "dense", 64, 1024),
    ("fused-ffn-int8", "full", 128, 1024),
    ("fused-ffn-int8", "dense", 128, 1024),
    ("fused-all-int8", "dense", 128, 1024),
]


def run_variants(emb: Any, graphs: dict[str, Path], entries: list, cores: int) -> list[dict]:
    from kbase.retrieval import onnx_embed as OE
    from kbase.retrieval.dense_text import dense_text
    from kbase.retrieval.indexer import dense_chunks
    from tokenizers import Tokenizer

    pairs = [(e, c) for e in entries for c in dense_chunks(e)]
    texts = {
        "full": [f"{e.title}\n{c.text}" for e, c in pairs],
        "dense": [dense_text(e, c) for e, c in pairs],
    }
    tok = Tokenizer.from_file(str(graphs["ort-extended"] / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    lengths = {k: np.array([len(x.ids) for x in tok.encode_batch(v)]) for k, v in texts.items()}
    refs: dict[tuple[str, int], np.ndarray] = {}
    models: dict[str, Any] = {}
    rows = []
    saved = OE.BATCH_TOKENS
    try:
        for graph, recipe, limit, batch_tokens in PLAN:
            if graph not in graphs:
                continue
            if graph not in models:
                models[graph] = OE.OnnxDocEmbedder(graphs[graph])
            m = models[graph]
            tx = texts[recipe]
            if (recipe, limit) not in refs:
                refs[(recipe, limit)] = emb.embed(tx, max_length=limit)
            OE.BATCH_TOKENS = batch_tokens
            m.embed(tx[:16], max_length=limit)  # warm up
            best = (float("inf"), float("inf"))
            for _ in range(2):
                t, c = time.perf_counter(), time.process_time()
                vecs = m.embed(tx, max_length=limit)
                best = min(best, (time.process_time() - c, time.perf_counter() - t))
            cos = (vecs * refs[(recipe, limit)]).sum(axis=1)
            cpu, wall = best
            rows.append(
                {
                    "graph": graph,
                    "text": recipe,
                    "max_tokens": limit,
                    "batch_tokens": batch_tokens,
                    "chunks": len(tx),
                    "tokens": int(np.minimum(lengths[recipe], limit).sum()),
                    "cpu_s": round(cpu, 2),
                    "wall_s": round(wall, 2),
                    "entries_per_s_idle_est": round(len(entries) / (cpu / cores), 1),
                    "cos_vs_torch_min": round(float(cos.min()), 5),
                    "cos_vs_torch_mean": round(float(cos.mean()), 5),
                }
            )
            print(rows[-1], flush=True)
    finally:
        OE.BATCH_TOKENS = saved
    return rows


def length_facts(entries: list, tokenizer_json: Path) -> dict:
    """How many dense chunks exceed 128 / 256 word pieces, under each text recipe."""
    from kbase.retrieval.dense_text import dense_text
    from kbase.retrieval.indexer import dense_chunks
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_padding()
    tok.no_truncation()
    out: dict = {}
    pairs = [(e, c) for e in entries for c in dense_chunks(e)]
    for recipe, fn in (("full", lambda e, c: f"{e.title}\n{c.text}"), ("dense", dense_text)):
        for kind in sorted({e.kind for e, _ in pairs}):
            sel = [fn(e, c) for e, c in pairs if e.kind == kind]
            if not sel:
                continue
            n = np.array([len(x.ids) for x in tok.encode_batch(sel)])
            out[f"{kind}/{recipe}"] = {
                "chunks": len(n),
                "mean_tokens": round(float(n.mean()), 1),
                "over_128": int((n > 128).sum()),
                "over_256": int((n > 256).sum()),
                "tokens_cut_at_128": int(np.minimum(n, 128).sum()),
                "tokens_cut_at_256": int(np.minimum(n, 256).sum()),
            }
    return out
