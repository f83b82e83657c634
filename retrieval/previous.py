"""What a re-index takes over from the previous generation without redoing it (issue #11: under a
second after one edit at ~6.5k entries; docs/architecture.md). Validating ~6.5k entries into
models was a second of every re-index, so unchanged entries are carried over undecoded (`Carried`,
from the columns and carry.json) and the writer copies their stored lines; `Previous.decoded`
builds a whole entry where one is needed."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kbase.retrieval.generations import FORMAT_VERSION, EntryTable, Generation, read_card_stats
from kbase.retrieval.lexical import TOKENIZER_FILE
from kbase.retrieval.vectors import partition_key

from kbase.schema import Chunk, Entry

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
        carried = (
            None if gen is None or self.table is None else carried_entries(self.table, gen.path)
        )
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
        if self.gen is not None:
            self.gen.texts.fill(
                [
                    (self._pos[id(e)], e)
                    for e in entries
                    if id(e) in self._pos and not isinstance(e, Carried)
                ]
            )

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
        self,
        entries: list[Any],
        card_stats: dict[str, list[int]],
        meta: dict,
        by_part: dict[str, list[str]],
        prev_vectors: Any,
        tokenizer: str,
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
            made_by = (gen.path / "bm25" / TOKENIZER_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return False
        same_files = read_card_stats(gen) == card_stats and made_by == tokenizer
        return (
            same_files
            and set(prev_vectors.parts) == set(by_part)
            and all(prev_vectors.ids(k) == ids for k, ids in by_part.items())
        )


# ------------------------------------------------------------------ what the indexer asks of chunks
# Which of an entry's chunks the indexer embeds, for models and for entries carried over
# undecoded alike.
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
