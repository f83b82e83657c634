"""Build or update the hybrid index: parse every entry, embed only what changed,
rebuild BM25, publish a new generation atomically.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbase.schema import Chunk, Entry, Problem

PR_MAX_TOKENS = 128
LEXICAL_ONLY_SECTIONS = frozenset({"files", "symbols"})
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

    def as_dict(self) -> dict:
        return {
            "entries": self.entries,
            "chunks": self.chunks,
            "embedded_entries": self.embedded_entries,
            "embedded_chunks": self.embedded_chunks,
            "removed_entries": self.removed_entries,
            "kept_previous": self.kept_previous,
            "problems": [p.model_dump() for p in self.problems],
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "generation": self.generation,
        }


def parser_fingerprint() -> str:
    """Changes whenever the code that turns a card into an Entry changes: cached entries of an
    earlier generation are reused only under the same fingerprint."""
    import hashlib
    import importlib

    h = hashlib.sha256()
    for mod in ("kbase.ingest.cards", "kbase.ingest.card_format", "kbase.schema"):
        f = getattr(importlib.import_module(mod), "__file__", None)
        if f:
            h.update(Path(f).read_bytes())
    return h.hexdigest()[:16]


def _cards(root: Path, reuse: dict[str, Entry]) -> tuple[list[Entry], list[Problem]]:
    """Every PR card as an Entry; a card whose text is unchanged since the previous generation
    (same path, same content hash) is taken from it instead of being parsed again: parsing
    thousands of YAML cards was most of an incremental re-index (issue #11)."""
    import hashlib

    from kbase.ingest.cards import CardProblems, card_entry, card_files, load_card
    from kbase.ingest.files import FileProblem, display_path, read_text

    entries: list[Entry] = []
    problems: list[Problem] = []
    for p in card_files(root):
        old = reuse.get(display_path(p, root))
        if old is not None:
            try:
                text = read_text(p, root)
            except FileProblem:
                text = None
            if (
                text is not None
                and hashlib.sha256(text.encode("utf-8")).hexdigest() == old.content_hash
            ):
                entries.append(old)
                continue
        try:
            entries.append(card_entry(load_card(p, root)))
        except CardProblems as cp:
            problems.extend(cp.problems)
    return entries, problems


def collect_entries(
    root: Path, reuse: dict[str, Entry] | None = None
) -> tuple[list[Entry], list[Problem], set[str]]:
    """Every skill and PR card under root, the problems found, and the paths that failed.
    `reuse`: path -> PR-card Entry of the previous generation (same parser fingerprint)."""
    from kbase.ingest.files import display_path
    from kbase.ingest.skills import find_skill_files, load_entries

    entries: list[Entry] = []
    problems: list[Problem] = []
    failed: set[str] = set()
    from kbase.drafts import find_draft_files

    files = find_skill_files(root) + find_draft_files(root)  # drafts: searchable, status draft
    for f, (entry, bad) in zip(files, load_entries(files, root), strict=True):
        if entry is not None:
            entries.append(entry)
        else:
            problems.extend(bad)
            failed.add(display_path(f, root))
    if (root / "pr_archive").is_dir():
        cards, card_problems = _cards(root, reuse or {})
        entries.extend(cards)
        problems.extend(card_problems)
        failed.update(p.path for p in card_problems)
    seen: dict[str, str] = {}
    unique: list[Entry] = []
    for e in entries:
        if e.id in seen:
            problems.append(
                Problem(
                    path=e.path,
                    line=1,
                    field="name",
                    message=f"duplicate id {e.id!r} (also {seen[e.id]})",
                )
            )
            failed.add(e.path)
            continue
        seen[e.id] = e.path
        unique.append(e)
    return unique, problems, failed


def _vector_id(chunk: Chunk, content_hash: str) -> str:
    # The content hash is part of the id, so an edited entry gets new vectors while the
    # old ones stay queryable until the new generation is published.
    return f"{chunk.entry_id}::{content_hash[:12]}::{chunk.id.rsplit('::', 1)[-1]}"


def dense_chunks(entry: Entry) -> list[Chunk]:
    """The chunks that get a vector. A PR card's file lists and touched symbols are paths and
    identifiers: the embedding model splits them into meaningless word pieces, BM25 matches them
    exactly, and they were most of the embedding time (issue #11). Only a card's prose (summary,
    description, notes) is embedded."""
    if entry.kind != "pr":
        return entry.chunks
    return [c for c in entry.chunks if c.section not in LEXICAL_ONLY_SECTIONS]


def _metadata(entry: Entry) -> dict:
    md: dict[str, Any] = {"kind": entry.kind, "entry_id": entry.id, "repo": entry.repo or ""}
    for t in entry.tags:
        md[f"t:{t}"] = True
    return md


def build_index(
    root: Path,
    home: Path,
    embedder_factory: Callable[[], Any],
    chroma_url: str | None = None,
    progress: Progress | None = None,
    gc: bool = True,
    batch: int | None = None,
    extra_entries: list[Entry] | None = None,
    model_path: str | None = None,
) -> IndexReport:
    """`extra_entries` come from elsewhere than root (benchmarks, other importers); pass them on
    every run. `model_path`: the embedding model's folder, so the ONNX query model can be checked
    without loading it (default: the packaged model)."""
    from kbase.retrieval import generations as G
    from kbase.retrieval.lexical import build_bm25, load_token_cache
    from kbase.retrieval.vectors import VectorStore, partition_key

    rep = IndexReport()
    t0 = time.perf_counter()
    with G.writer_lock(home):
        prev = G.load_generation(home)
        fingerprint = parser_fingerprint()
        reuse = (
            {e.path: e for e in prev.entries if e.kind == "pr"}
            if prev is not None and prev.meta.get("parser") == fingerprint
            else {}
        )
        if progress:
            progress("reading entries", 0, 0)
        entries, problems, failed = collect_entries(root, reuse)
        entries.extend(extra_entries or [])
        rep.problems = problems
        # Nothing already indexed is lost: an entry that fails to parse keeps its last good version.
        present = {e.path for e in entries}
        if prev is not None:
            for old in prev.entries:
                if old.path in failed and old.path not in present and (root / old.path).exists():
                    entries.append(old)
                    rep.kept_previous.append(old.id)
        prev_ids = {e.id for e in prev.entries} if prev else set()
        rep.removed_entries = sorted(prev_ids - {e.id for e in entries})
        rep.seconds["parse"] = time.perf_counter() - t0

        t1 = time.perf_counter()
        if progress:
            progress("comparing with the index", 0, 0)
        store = VectorStore(home, chroma_url)
        for e in entries:
            for c in e.chunks:
                c.id = _vector_id(c, e.content_hash)
        wanted = [c.id for e in entries for c in e.chunks]
        by_part: dict[str, list[str]] = {}
        for e in entries:
            by_part.setdefault(partition_key(e.kind, e.repo), []).extend(
                c.id for c in dense_chunks(e)
            )
        have: set[str] = set()
        for key, ids in by_part.items():
            have |= store.existing_ids(key, ids)
        todo = [e for e in entries if any(c.id not in have for c in dense_chunks(e))]
        rep.seconds["diff"] = time.perf_counter() - t1

        t2 = time.perf_counter()
        if todo:
            if progress:
                progress("loading the embedding model", 0, 0)
            embedder = embedder_factory()
            if batch is None:  # a GPU is only busy with thousands of texts a call
                batch = 256 if str(getattr(embedder, "device", "cpu")) == "cpu" else 4096
            chunks = [(e, c) for e in todo for c in dense_chunks(e)]
            chunks.sort(key=lambda ec: ec[0].kind != "skill")  # skills first, then PR cards
            for i in range(0, len(chunks), batch):
                part = chunks[i : i + batch]
                texts = [f"{e.title}\n{c.text}" for e, c in part]
                if all(e.kind == "pr" for e, _ in part) and hasattr(embedder, "full_length"):
                    vecs = embedder.embed(texts, max_length=PR_MAX_TOKENS)
                else:
                    vecs = embedder.embed(texts)
                groups: dict[str, list[int]] = {}
                for j, (e, _) in enumerate(part):
                    groups.setdefault(partition_key(e.kind, e.repo), []).append(j)
                for key, rows in groups.items():
                    store.upsert(
                        key,
                        [part[j][1].id for j in rows],
                        [vecs[j] for j in rows],
                        [{**_metadata(part[j][0]), "section": part[j][1].section} for j in rows],
                    )
                if progress:
                    progress("embed", min(i + batch, len(chunks)), len(chunks))
            rep.embedded_entries = sorted(e.id for e in todo)
            rep.embedded_chunks = len(chunks)
        rep.seconds["embed"] = time.perf_counter() - t2

        t3 = time.perf_counter()
        gid, tmp = G.new_generation_dir(home)
        build_bm25(
            [c for e in entries for c in e.chunks],
            [e.title for e in entries for _ in e.chunks],
            tmp / "bm25",
            cache=load_token_cache(prev.path / "bm25") if prev is not None else None,
        )
        G.write_entries(
            tmp, entries, {"root": str(root), "entries": len(entries), "parser": fingerprint}
        )
        rep.seconds["bm25+write"] = time.perf_counter() - t3
        G.publish(home, gid, tmp)
        rep.generation = gid
        _refresh_onnx(home, embedder_factory, embedder if todo else None, model_path)

        if gc and prev is not None:
            kept = set(wanted)
            stale: dict[str, set[str]] = {}
            for e in prev.entries:
                for c in dense_chunks(e):
                    if c.id not in kept:
                        stale.setdefault(partition_key(e.kind, e.repo), set()).add(c.id)
            for key, gone in stale.items():
                store.delete(key, gone)
        store.close()
        rep.entries = len(entries)
        rep.chunks = len(wanted)
        rep.seconds["total"] = time.perf_counter() - t0
        if progress:
            progress("done", 1, 1)
    return rep


def _refresh_onnx(
    home: Path,
    embedder_factory: Callable[[], object],
    embedder: object = None,
    model_path: str | None = None,
) -> None:
    """Keep home/onnx, the fast query embedder (retrieval/onnx_query.py), in step with the model.
    Only when torch is importable; a failure is a warning on stderr, never a failed index."""
    import importlib.util
    import sys

    try:
        from kbase.retrieval import onnx_query as OQ

        if not OQ.enabled() or importlib.util.find_spec("torch") is None:
            return
        path = getattr(embedder, "model_path", None)
        if path is None:  # nothing was embedded: find the path without loading the model
            path = model_path
            if path is None:
                from kbase.config import default_model_path

                path = default_model_path()
        if OQ.is_fresh(home / OQ.ONNX_DIR, path):
            return
        if embedder is None:
            embedder = embedder_factory()
        path = getattr(embedder, "model_path", None)
        if path is None or not hasattr(embedder, "model"):
            return  # not a sentence-transformers Embedder (a test double): nothing to export
        OQ.ensure_onnx(home, path, embedder)
    except Exception as exc:  # noqa: BLE001
        print(
            f"kbase: warning: ONNX query model not exported ({type(exc).__name__}: {exc}); "
            "searches will load torch instead",
            file=sys.stderr,
        )
