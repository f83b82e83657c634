"""Pieces of an index build beside the embedding loop (docs/architecture.md): what a re-index
takes over from the previous generation, which chunks get a vector and the text the model sees,
the BM25 stage, the vector store opened when first needed, the upserts into Chroma (grouped by
partition) and the deletion of the vectors no entry names any more."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kbase.retrieval import lexical as L
from kbase.retrieval.generations import FORMAT_VERSION, EntryTable, Generation, read_card_stats
from kbase.retrieval.vectors import VectorStore, partition_key

from kbase.schema import Chunk, Entry

# ------------------------------------------------------------------ the text the model sees
# The repeated title and headers, hashes, counts and paths were about half of a PR card's word
# pieces (issue #11), and attention cost grows with length. RECIPE is part of every PR vector id
# (indexer._vector_id): changing it re-embeds each card once.
RECIPE = "pr2"  # bump whenever dense_text's output for a PR chunk changes
# Sentences of the summary paragraph (ingest/card_format.summary_text) that repeat the head lines
# or are hashes, counts and paths: matched by how they start.
_DROP = (
    "PR #",
    "Commit ",
    "It changes ",
    "Families: ",
    "Categories: ",
    "Kernel types: ",
    "Renames: ",
    "Largest changes: ",
    "The same PR number also appears",
)
_SENTENCE = re.compile(r"(?<=\.)\s+(?=[A-Z])")


def _summary(entry: Entry, text: str) -> str:
    lines = text.split("\n")
    if lines and lines[0].strip() == entry.title.strip():
        lines = lines[1:]  # the title is prepended anyway
    out: list[str] = []
    para = False  # the head lines come first, then summary_text's paragraph
    for line in lines:
        para = para or line.startswith(("PR #", "Commit "))
        if not para:
            out.append(line)
            continue
        kept = [s for s in _SENTENCE.split(line) if not s.startswith(_DROP)]
        if kept:
            out.append(" ".join(kept))
    return "\n".join(out)


def _strip_header(entry: Entry, text: str) -> str:
    """'Description of repo PR #N (title):\\nbody' -> 'body' (the title is prepended anyway)."""
    first, sep, rest = text.partition("\n")
    return rest if sep and first.endswith(f"({entry.title}):") else text


def dense_text(entry: Entry, chunk: Chunk) -> str:
    if entry.kind != "pr":
        return f"{entry.title}\n{chunk.text}"
    if chunk.section == "summary":
        body = _summary(entry, chunk.text)
    else:
        body = _strip_header(entry, chunk.text)
    return f"{entry.title}\n{body}"


# ------------------------------------------------------------------ the previous generation
# Validating ~6.5k entries into models was a second of every re-index (issue #11): unchanged
# entries are carried over undecoded (`Carried`) and the writer copies their stored lines.
CARRY = "carry.json"  # per entry: path, content hash, chunk sections (read by the indexer only)


def write_carry(path: Path, entries: list[Any]) -> None:
    cols = {
        "paths": [e.path for e in entries],
        "hashes": [e.content_hash for e in entries],
        "sections": [
            e.sections if isinstance(e, Carried) else [c.section for c in e.chunks] for e in entries
        ],
    }
    (path / CARRY).write_text(json.dumps(cols), "ascii")


class Carried:
    """One entry of the previous generation, at position i of its table, not decoded: the
    indexer needs its columns, and its chunks only where it is decoded (Previous.decoded)."""

    __slots__ = "i id kind repo title path content_hash tags chunk_ids sections".split()

    def __init__(self, table: EntryTable, cols: dict[str, list[Any]], i: int):
        self.i = i
        self.id = table.ids[i]
        self.kind = table.kinds[i]
        self.repo = table.repos[i]
        self.title = table.titles[i]
        self.tags = table.tags[i]
        self.path = cols["paths"][i]
        self.content_hash = cols["hashes"][i]
        self.chunk_ids: list[str] = table.chunk_ids[i]
        self.sections: list[str] = cols["sections"][i]


def carried_entries(table: EntryTable, path: Path) -> list[Carried] | None:
    """Every entry of a generation as Carried, or None when it lacks the carry columns (written
    before them) or they disagree with its entries (then it is decoded instead)."""
    try:
        cols = json.loads((path / CARRY).read_bytes())
        if any(len(cols[k]) != len(table) for k in ("paths", "hashes", "sections")) or any(
            len(s) != len(c) for s, c in zip(cols["sections"], table.chunk_ids, strict=True)
        ):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [Carried(table, cols, i) for i in range(len(table))]


class Previous:
    def __init__(self, gen: Generation | None):
        """`gen`: as load_generation gives it (its entries an EntryTable). Its entries are carried
        over undecoded when it stores the carry columns, else decoded."""
        self.gen = gen
        table = gen.entries if gen is not None else None
        self.table = table if isinstance(table, EntryTable) else None
        carried = carried_entries(self.table, gen.path) if gen and self.table is not None else None
        self.carries = carried is not None
        self.entries: Sequence[Any] = (
            carried if carried is not None else list(gen.entries) if gen is not None else []
        )
        self._pos = {id(e): i for i, e in enumerate(self.entries)}
        self.by_id = {e.id: e for e in self.entries}
        self._lines: list[bytes] | None = None

    def _texts_line(self, i: int) -> bytes:
        if self._lines is None:
            assert self.gen is not None
            self._lines = self.gen.texts.lines()
        return self._lines[i]

    def fill(self, entries: Iterable[Any]) -> None:
        """Chunk texts for those of these entries that come from the previous generation
        (a Carried entry reads its own when asked)."""
        own = [e for e in entries if id(e) in self._pos and not isinstance(e, Carried)]
        if self.gen is not None:
            self.gen.texts.fill([(self._pos[id(e)], e) for e in own])

    def decoded(self, entries: list[Any]) -> dict[int, Entry]:
        """id(carried entry) -> the whole entry with its texts (a fresh model: the caller may
        change it), for the Carried among these (to embed or tokenize them again); the decoded
        entry counts as taken over (owns, stored_line)."""
        out: dict[int, Entry] = {}
        for e in entries:
            if isinstance(e, Carried) and self.table is not None:
                out[id(e)] = full = self.table[e.i].model_copy(deep=True)
                self._pos[id(full)] = e.i
        self.fill(out.values())
        return out

    def stored_line(self, e: Any) -> bytes | None:
        """The entry's texts.jsonl line as stored, if it is a previous entry taken over."""
        i = self._pos.get(id(e))
        return None if i is None else self._texts_line(i)

    def owns(self, e: Any) -> bool:
        """True for an entry object taken over from the previous generation."""
        return id(e) in self._pos

    def kept_vectors(self, todo: list[Any], files: Any) -> dict[str, Any]:
        """Chunk id -> a vector the previous generation's files hold for it: under the same id (an
        id names text, model and recipe: a store emptied or moved to another layout or server is
        filled again without embedding), or for a chunk of the same entry, title and text. So an
        edited entry's unchanged chunks keep their vectors exactly: the int8 model's vectors depend
        on the batch they were embedded in (cosine ~0.994 for a skill's summary embedded again)."""
        if files is None:
            return {}
        olds = [self.by_id[e.id] for e in todo if e.id in self.by_id and not self.owns(e)]
        full = self.decoded(olds)  # their chunk texts, for the Carried among them
        old_of: dict[str, Any] = {o.id: full.get(id(o), o) for o in olds}
        self.fill(old_of.values())
        wanted: dict[str, set[str]] = {}
        same: dict[str, str] = {}  # new chunk id -> the old chunk id of the same text
        for e in todo:
            ids = wanted.setdefault(partition_key(e.kind, e.repo), set())
            ids.update(c.id for c in dense_chunks(e))
            old = old_of.get(e.id)
            if old is not None and (old.kind, old.title, old.repo) == (e.kind, e.title, e.repo):
                have = {c.text: c.id for c in dense_chunks(old) if c.text}
                match = {c.id: have[c.text] for c in dense_chunks(e) if c.text in have}
                same.update(match)
                ids.update(match.values())
        got = {i: v for key, ids in wanted.items() for i, v in files.vectors_of(key, ids).items()}
        new_ids = [c.id for e in todo for c in dense_chunks(e)]
        out = {i: got[i] for i in new_ids if i in got}
        out.update({i: got[same[i]] for i in new_ids if i not in out and same.get(i) in got})
        return out

    def unchanged(
        self, entries: list[Any], card_stats: dict, meta: dict, by_part: dict, prev_vectors: Any
    ) -> bool:
        """True when a new generation would equal this one: same entries (id, path, content
        hash) in the same order, card signatures, meta, vector files and BM25 files."""
        gen = self.gen
        if gen is None or prev_vectors is None or len(entries) != len(self.entries):
            return False
        if any(
            (a.id, a.path, a.content_hash) != (b.id, b.path, b.content_hash)
            for a, b in zip(entries, self.entries, strict=True)
        ):
            return False
        # an older layout is written anew (vectors taken over, none embedded)
        same_meta = all(gen.meta.get(k) == v for k, v in meta.items())
        if not same_meta or gen.meta.get("format") != FORMAT_VERSION or not self.carries:
            return False
        try:
            made_by = (gen.path / "bm25" / L.TOKENIZER_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return False
        same_files = read_card_stats(gen) == card_stats and made_by == L.tokenizer_fingerprint()
        return (
            same_files
            and set(prev_vectors.parts) == set(by_part)
            and all(prev_vectors.ids(k) == ids for k, ids in by_part.items())
        )


# ------------------------------------------------------------------ what the indexer asks of chunks
LEXICAL_ONLY_SECTIONS = frozenset({"files", "symbols"})


def dense_chunks(entry: Entry) -> list[Chunk]:
    """The chunks that get a vector. A PR card's file lists and touched symbols are paths and
    identifiers: the embedding model splits them into meaningless word pieces, BM25 matches them
    exactly, and they were most of the embedding time (issue #11). Only a card's prose (summary,
    description, notes) is embedded."""
    if entry.kind != "pr":
        return entry.chunks
    return [c for c in entry.chunks if c.section not in LEXICAL_ONLY_SECTIONS]


def ids_of(e: Any) -> list[str]:
    """The entry's chunk ids (a Carried entry's as stored, without making its chunks)."""
    return e.chunk_ids if isinstance(e, Carried) else [c.id for c in e.chunks]


def dense_ids(e: Any) -> list[str]:
    """The ids of dense_chunks(e)."""
    if isinstance(e, Carried):
        if e.kind != "pr":
            return e.chunk_ids
        pairs = zip(e.chunk_ids, e.sections, strict=True)
        return [i for i, s in pairs if s not in LEXICAL_ONLY_SECTIONS]
    return [c.id for c in dense_chunks(e)]


# ------------------------------------------------------------------ build stages
def bm25_stage(
    prevs: Previous, entries: list[Entry], chunk_ids: list[list[str]], out: Path
) -> Callable[[], float]:
    """Build the BM25 index of `entries` (whose chunks' ids are `chunk_ids`) into `out` when the
    callable returned is called; it says how long the build took. The previous generation's
    token ids are read now, before the embedding model loads."""
    titles = [e.title for e in prevs.entries]
    prev = prevs.gen
    cache = L.load_token_cache(prev.path / "bm25", titles) if prev is not None else None
    if cache is None:  # else it holds every chunk of the entries taken over from prev
        swap = prevs.decoded(entries)
        entries = [swap.get(id(e), e) for e in entries]
        prevs.fill(entries)
    counts = [len(ids) for ids in chunk_ids]
    # the chunks to tokenize: those of entries carried over undecoded are in the cache (their
    # ids stand in)
    chunks = [c for e in entries for c in (e.chunk_ids if isinstance(e, Carried) else e.chunks)]

    def build() -> float:
        t = time.perf_counter()
        chunk_titles = [e.title for e, n in zip(entries, counts, strict=True) for _ in range(n)]
        ids = [i for ids in chunk_ids for i in ids]
        L.build_bm25(chunks, chunk_titles, out, cache, [e.title for e in entries], ids)
        return time.perf_counter() - t

    return build


def upsert_pairs(
    store: Callable[[], Any], pairs: list[tuple[Entry, Chunk]], vecs: Any, with_metadata: bool
) -> None:
    """Vectors of (entry, chunk) pairs into the store, grouped by partition. `with_metadata`: a
    Chroma server gets each chunk's kind, entry, section and tags for its `where` filters; the
    embedded store's reader filters with the index's own columns (dense.py), and metadata was
    half the time of an embedded insert."""
    groups: dict[str, list[int]] = {}
    for j, (e, _) in enumerate(pairs):
        groups.setdefault(partition_key(e.kind, e.repo), []).append(j)
    for key, rows in groups.items():
        meta = [_metadata(*pairs[j]) for j in rows] if with_metadata else None
        store().upsert(key, [pairs[j][1].id for j in rows], [vecs[j] for j in rows], meta)


def _metadata(e: Entry, chunk: Chunk) -> dict[str, Any]:
    head = {"kind": e.kind, "entry_id": e.id, "repo": e.repo or ""}
    return {**head, **{f"t:{t}": True for t in e.tags}, "section": chunk.section}


class LazyStore:
    """The vector store, opened when first called for (a no-op re-index never opens Chroma)."""

    def __init__(self, home: Path, chroma_url: str | None):
        self.home, self.chroma_url = home, chroma_url
        self.opened: Any = None

    def __call__(self) -> Any:
        if self.opened is None:
            self.opened = VectorStore(self.home, self.chroma_url)
        return self.opened

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()


def delete_stale(prevs: Previous, keep: set[str], store: Callable[[], Any]) -> None:
    """Delete from the store the previous generation's vectors that no entry names now."""
    stale: dict[str, set[str]] = {}
    for e in prevs.entries:
        for cid in dense_ids(e):
            if cid not in keep:
                stale.setdefault(partition_key(e.kind, e.repo), set()).add(cid)
    for key, gone in stale.items():
        store().delete(key, gone)
