"""Build or update the hybrid index: parse every entry, embed only what changed, rebuild BM25,
publish a new generation atomically."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kbase.retrieval import build_stages as BS
from kbase.retrieval import generations as G
from kbase.retrieval import vectors as V
from kbase.retrieval.build_stages import Previous, dense_chunks
from kbase.retrieval.collect import collect_entries, parser_fingerprint

from kbase.schema import Chunk, Entry, Problem

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class IndexReport:
    entries: int = 0
    chunks: int = 0
    embedded_entries: list[str] = field(default_factory=list)
    embedded_chunks: int = 0
    removed_entries: list[str] = field(default_factory=list)
    kept_previous: list[str] = field(default_factory=list)  # failed to parse; old version kept
    problems: list[Problem] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    generation: str = ""
    backend: str = ""  # what embedded this run's chunks: onnxruntime or torch

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "problems": [p.model_dump() for p in self.problems],
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


PR_MAX_TOKENS = 128
MAX_PROBLEMS_KEPT = 50  # problems named in a generation's meta (/healthz); the count is exact


def _vector_id(chunk: Chunk, content_hash: str, model: str = "") -> str:
    # The content hash is part of the id, so an edited entry gets new vectors while the
    # old ones stay queryable until the new generation is published. A PR chunk's vector also
    # depends on how its text is cut for the model (build_stages.dense_text, PR_MAX_TOKENS), and
    # every vector on the model that made it when that is not the fp32 one (`model`:
    # onnx_embed.index_recipe()), so an index never mixes the two.
    tag = content_hash[:12]
    if chunk.kind == "pr":
        recipe = f"{content_hash}:{BS.RECIPE}:{PR_MAX_TOKENS}" + (f":{model}" if model else "")
        tag = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    elif model:
        tag = hashlib.sha256(f"{content_hash}:{model}".encode()).hexdigest()[:12]
    return f"{chunk.entry_id}::{tag}::{chunk.id.rsplit('::', 1)[-1]}"


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a build: a re-index allocates some 100k long-lived
    containers (columns, card signatures, the carried entries), and the collector's passes over
    them were a quarter of a one-edit re-index at 6.6k entries (1.01 s against 0.76 s in process,
    median of 4 alternating: 1.34x, what a server re-indexing in process waits). The build makes
    no reference cycles of its own; reference counting frees its garbage."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build_index(
    root: Path,
    home: Path,
    embedder_factory: Callable[[], Any],
    chroma_url: str | None = None,
    progress: Progress | None = None,
    gc: bool = True,
    batch: int | None = None,
    extra_entries: list[Entry] | None = None,
    dense_model: str = "",
) -> IndexReport:
    """`extra_entries` come from elsewhere than root (benchmarks, other importers), on every run.
    `dense_model`: the embedder's `recipe` ("" for fp32, torch or ONNX; onnx_embed.index_recipe)"""
    rep, t0 = IndexReport(), time.perf_counter()
    progress = progress or (lambda stage, done, total: None)
    with _gc_paused(), G.writer_lock(home):
        # entries carried over undecoded, chunk texts read only where needed
        prev = G.load_generation(home)
        prevs = Previous(prev)
        # meta.dense: the recipe of the generation's vectors (see _vector_id)
        dense = f"{BS.RECIPE}:{PR_MAX_TOKENS}" + (f":{dense_model}" if dense_model else "")
        fingerprint = parser_fingerprint()
        same_recipe = prev is not None and prev.meta.get("dense") == dense
        same_parser = prev is not None and prev.meta.get("parser") == fingerprint
        progress("reading entries", 0, 0)
        entries, card_stats = _entries(root, prevs, same_parser and same_recipe, extra_entries, rep)
        rep.seconds["parse"] = time.perf_counter() - t0

        store = BS.LazyStore(home, chroma_url)
        progress("comparing with the index", 0, 0)
        entries, todo, chunk_ids, by_part, prev_vecs, trust_files = _diff(
            prevs, entries, dense_model, store, rep
        )
        meta = _meta(root, entries, fingerprint, chroma_url or V.LAYOUT, dense, rep)
        same = (entries, card_stats, meta, by_part, prev_vecs)
        noop = not (todo or rep.removed_entries) and trust_files and prevs.unchanged(*same)
        if not noop:
            gid, tmp = G.new_generation_dir(home)
            bm25_done = BS.bm25_stage(prevs, entries, chunk_ids, tmp / "bm25")

        # any store's vectors (Previous.kept_vectors: a vector id names text, model and recipe)
        reuse = prev_vecs if prev_vecs is not None and prev_vecs.ok and same_recipe else None
        fresh = _embed(
            todo, prevs, reuse, rep, embedder_factory, dense_model, batch, store, progress
        )

        t3 = time.perf_counter()
        if noop:
            # nothing changed: the current generation stays (no files written, none published)
            rep.generation = prev.gen_id if prev is not None else ""
        else:
            bm25_done()
            V.assemble_generation_vectors(
                tmp, by_part, fresh, prev_vecs if trust_files else None, store
            )
            G.write_card_stats(tmp, card_stats)
            G.write_entries(tmp, entries, meta, prevs)
            G.publish(home, gid, tmp)
            rep.generation = gid
        rep.seconds["bm25+write"] = time.perf_counter() - t3

        wanted = [i for ids in chunk_ids for i in ids]
        if gc and prev is not None:
            BS.delete_stale(prevs, set(wanted), store)
        store.close()
        rep.entries, rep.chunks = len(entries), len(wanted)
        rep.seconds["total"] = time.perf_counter() - t0
        progress("done", 1, 1)
    return rep


def _diff(
    prevs: Previous, entries: list[Any], dense_model: str, store: BS.LazyStore, rep: IndexReport
) -> tuple[list[Any], list[Any], list[list[str]], dict[str, list[str]], Any, bool]:
    """(entries, those whose vectors are missing, each entry's chunk ids, the dense chunk ids of
    each partition, the previous generation's vector files, whether they can be trusted)."""
    t1, prev, chroma_url = time.perf_counter(), prevs.gen, store.chroma_url
    prev_vecs = V.GenVectors(prev.path) if prev is not None else None
    # The previous generation's vector files say which vectors exist, without asking Chroma
    # for every id; trusted only when they were written against the same store.
    same_store = prev is not None and prev.meta.get("vector_store") == (chroma_url or V.LAYOUT)
    has_store = chroma_url is not None or (store.home / V.PARTS_DIR).is_dir()
    trust_files = bool(same_store and has_store and prev_vecs is not None and prev_vecs.ok)
    known = prev_vecs if trust_files else None
    # what the files lack may still be in the store: another home sharing a Chroma server
    # may have embedded it (team mode); embedded, only this lock's writes are there
    ask_store = bool(chroma_url) or not trust_files
    for e in entries:
        if not prevs.owns(e):  # taken over from prev: its chunks have their vector ids already
            for c in e.chunks:
                c.id = _vector_id(c, e.content_hash, dense_model)
    chunk_ids = [BS.ids_of(e) for e in entries]
    dense_of = [BS.dense_ids(e) for e in entries]
    by_part: dict[str, list[str]] = {}
    for e, ids in zip(entries, dense_of, strict=True):
        by_part.setdefault(V.partition_key(e.kind, e.repo), []).extend(ids)
    have: set[str] = set()
    for key, ids in by_part.items():
        found = known.all_ids(key).intersection(ids) if known is not None else set()
        have |= found
        missing = [i for i in ids if i not in found]
        if missing and ask_store:
            have |= store().existing_ids(key, missing)
    todo = [e for e, ids in zip(entries, dense_of, strict=True) if any(i not in have for i in ids)]
    # an entry carried over undecoded whose vectors are missing is embedded whole
    swap = prevs.decoded(todo)
    if swap:
        entries = [swap.get(id(e), e) for e in entries]
        todo = [swap.get(id(e), e) for e in todo]
    rep.seconds["diff"] = time.perf_counter() - t1
    return entries, todo, chunk_ids, by_part, prev_vecs, trust_files


def _meta(
    root: Path, entries: list[Any], parser: str, store: str, dense: str, rep: IndexReport
) -> dict[str, Any]:
    return {
        "root": str(root),
        "entries": len(entries),
        "parser": parser,
        "vector_store": store,
        "dense": dense,
        # what /healthz reports as degraded: files left out (or kept at their last good
        # version) because they do not parse; a changed list is a new generation
        "problems": [f"{p.path}:{p.line}: {p.message}" for p in rep.problems[:MAX_PROBLEMS_KEPT]],
        "problem_count": len(rep.problems),
    }


def _entries(
    root: Path, prevs: Previous, reusable: bool, extra: list[Entry] | None, rep: IndexReport
) -> tuple[list[Any], dict[str, list[int]]]:
    """Every entry under root, then `extra`; those unchanged since the previous generation are taken
    over from it, and one that fails to parse keeps its last good version (nothing indexed is lost).
    Entries are taken over only when made by the same parser and the same dense-text recipe (a new
    recipe re-embeds every card)."""
    reuse = {e.path: e for e in prevs.entries} if reusable else {}
    card_stats: dict[str, list[int]] = {}
    stats = G.read_card_stats(prevs.gen) if reuse else None
    entries, rep.problems, failed = collect_entries(root, reuse, stats, card_stats)
    entries.extend(extra or [])
    present = {e.path for e in entries}
    for old in prevs.entries:
        if old.path in failed and old.path not in present and (root / old.path).exists():
            entries.append(old)
            rep.kept_previous.append(old.id)
    rep.removed_entries = sorted(set(prevs.by_id) - {e.id for e in entries})
    return entries, card_stats


def _embed(
    todo: list[Any],
    prevs: Previous,
    reuse: Any,
    rep: IndexReport,
    factory: Callable[[], Any],
    dense_model: str,
    batch: int | None,
    store: BS.LazyStore,
    progress: Progress,
) -> dict[str, Any]:
    """chunk id -> vector of the entries to embed: kept from the previous generation where a chunk's
    text did not change, the rest embedded batch after batch, each batch upserted as it comes."""
    t = time.perf_counter()
    store_s = 0.0

    def upsert(pairs: list[tuple[Entry, Chunk]]) -> None:
        nonlocal store_s
        t = time.perf_counter()
        BS.upsert_pairs(store, pairs, [fresh[c.id] for _, c in pairs], bool(store.chroma_url))
        store_s += time.perf_counter() - t

    prevs.fill(todo)  # texts to embed, for entries taken over whose vectors are missing
    kept = prevs.kept_vectors(todo, reuse)
    fresh: dict[str, Any] = dict(kept)
    # upserted with the first batch embedded: each Chroma upsert call costs ~0.1 s
    pending = [(e, c) for e in todo for c in dense_chunks(e) if c.id in kept]
    chunks = [(e, c) for e in todo for c in dense_chunks(e) if c.id not in kept]
    embedder: Any = None
    if chunks:
        progress("loading the embedding model", 0, 0)
        embedder = factory()
        if getattr(embedder, "recipe", "") != dense_model:
            raise RuntimeError(
                f"the document embedder is {getattr(embedder, 'recipe', '') or 'fp32'}, "
                f"the vector ids say {dense_model or 'fp32'}"
            )
    step = batch or 256  # chunks per model call and Chroma upsert
    chunks.sort(key=lambda ec: ec[0].kind != "skill")  # skills first, as before
    for i in range(0, len(chunks), step):
        part = chunks[i : i + step]
        texts = [BS.dense_text(e, c) for e, c in part]
        # a batch of PR chunks alone is cut at PR_MAX_TOKENS word pieces (when the embedder can)
        if all(e.kind == "pr" for e, _ in part) and hasattr(embedder, "full_length"):
            vecs = embedder.embed(texts, max_length=PR_MAX_TOKENS)
        else:
            vecs = embedder.embed(texts)
        for j, (_, c) in enumerate(part):
            fresh[c.id] = vecs[j]
        upsert(pending + part)
        pending = []
        progress("embed", i + len(part), len(chunks))
    if embedder is not None:  # shipped vectors load the model only when they lack one
        rep.backend = getattr(embedder, "backend", "torch")
    if pending:
        upsert(pending)
    rep.embedded_entries = sorted(e.id for e in todo)
    rep.embedded_chunks = len(chunks)
    # Chroma's inserts (HNSW construction) apart from the model's work: on a GPU they dominate
    rep.seconds["embed"] = time.perf_counter() - t - store_s
    rep.seconds["store"] = store_s
    return fresh
