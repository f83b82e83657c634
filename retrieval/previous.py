"""What a re-index takes over from the previous generation without redoing it (issue #11: an
incremental re-index after one edit must take under a second at ~6.5k entries).

The previous generation's entries are carried over undecoded: validating all ~6.5k entries of a
mined archive into models was a second of every incremental re-index that then changed one. A
`Carried` entry answers what the indexer asks of an unchanged entry (id, path, content hash,
kind, repo, title, tags, chunk ids and sections) from plain columns the generation stores
(carry.json), and the writer copies its stored entries.jsonl line, column values and texts line
as they are. Where the whole entry is needed (its vectors must be embedded again, an edited
entry's old chunk texts), `Previous` decodes it: the same pydantic validation of the same line a
full load does. Texts are read only for the entries that need them (to embed, or to tokenize
when the BM25 token cache lacks them). An edited entry keeps the vector of every chunk whose text
did not change. A run that finds nothing changed publishes no new generation.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from kbase.retrieval import fastjson as F
from kbase.retrieval.entry_table import EntryTable
from kbase.retrieval.generations import FORMAT_VERSION, Generation, read_card_stats

from kbase.schema import Chunk, Entry

CARRY = "carry.json"  # per entry: path, content hash, chunk sections (read by the indexer only)


def carry_columns(entries: list[Any]) -> dict[str, list[Any]]:
    return {
        "paths": [e.path for e in entries],
        "hashes": [e.content_hash for e in entries],
        "sections": [
            e.sections if isinstance(e, Carried) else [c.section for c in e.chunks] for e in entries
        ],
    }


def write_carry(path: Path, cols: dict[str, list[Any]]) -> None:
    (path / CARRY).write_bytes(F.dumps(cols))


def read_carry(path: Path, n: int) -> dict[str, list[Any]] | None:
    """The carry columns of a generation of n entries; None when absent or inconsistent."""
    try:
        cols = F.loads((path / CARRY).read_bytes())
        if any(len(cols[k]) != n for k in ("paths", "hashes", "sections")):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cols


class CarriedChunk:
    # no reference back to its entry: a cycle per entry would leave ~26k objects to the
    # cyclic garbage collector, whose passes over them were a good part of a re-index
    __slots__ = ("id", "section", "_texts", "_i", "_k")

    def __init__(self, cid: str, section: str, texts: _Texts, i: int, k: int):
        self.id = cid
        self.section = section
        self._texts = texts
        self._i = i
        self._k = k

    @property
    def text(self) -> str:
        """Read from the previous generation's texts.jsonl when first asked for."""
        return self._texts.of(self._i)[self._k]


class _Texts:
    """Chunk texts of the previous generation's entries, each entry's decoded once."""

    def __init__(self, line: Callable[[int], bytes], counts: list[int]):
        self._line = line
        self._counts = counts
        self._got: dict[int, list[str]] = {}

    def of(self, i: int) -> list[str]:
        got = self._got.get(i)
        if got is None:
            texts = json.loads(self._line(i))
            n = self._counts[i]
            got = self._got[i] = [*texts, *[""] * (n - len(texts))][:n]
        return got


class Carried:
    """One entry of the previous generation, at position i of its table, not decoded. Its chunks
    are made only when something asks for them (the indexer mostly needs their ids)."""

    __slots__ = (
        "i",
        "id",
        "kind",
        "repo",
        "title",
        "path",
        "content_hash",
        "tags",
        "chunk_ids",
        "sections",
        "_texts",
        "_chunks",
    )

    def __init__(self, table: EntryTable, cols: dict[str, list[Any]], i: int, texts: _Texts):
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
        self._texts = texts
        self._chunks: list[CarriedChunk] | None = None

    @property
    def chunks(self) -> list[CarriedChunk]:
        if self._chunks is None:
            self._chunks = [
                CarriedChunk(cid, sec, self._texts, self.i, k)
                for k, (cid, sec) in enumerate(zip(self.chunk_ids, self.sections, strict=True))
            ]
        return self._chunks

    def texts(self) -> list[str]:
        return self._texts.of(self.i)


def carried_entries(table: EntryTable, path: Path, texts_line: Any) -> list[Carried] | None:
    """Every entry of a generation as Carried, or None when it lacks the carry columns (written
    before them) or its columns disagree with its entries (then it is decoded instead).
    `texts_line(i)`: entry i's stored texts.jsonl line."""
    cols = read_carry(path, len(table))
    if cols is None or any(
        len(s) != len(c) for s, c in zip(cols["sections"], table.chunk_ids, strict=True)
    ):
        return None

    texts = _Texts(texts_line, [len(ids) for ids in table.chunk_ids])
    return [Carried(table, cols, i, texts) for i in range(len(table))]


def decode(table: EntryTable, c: Carried) -> Entry:
    """The whole entry, with its chunk texts (a fresh model: the caller may change it)."""
    e = table[c.i].model_copy(deep=True)
    for chunk, text in zip(e.chunks, c.texts(), strict=False):
        chunk.text = text
    return e


class Previous:
    def __init__(self, gen: Generation | None):
        """`gen`: as load_generation gives it (its entries an EntryTable). Its entries are carried
        over undecoded when it stores the carry columns, else decoded."""
        self.gen = gen
        table = gen.entries if gen is not None else None
        self.table = table if isinstance(table, EntryTable) else None
        carried = (
            carried_entries(self.table, gen.path, self._texts_line)
            if gen is not None and self.table is not None
            else None
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
        """id(carried entry) -> the whole entry with its texts, for the Carried among these
        (to embed them again); the decoded entry counts as taken over (owns, stored_line)."""
        out: dict[int, Entry] = {}
        for e in entries:
            if isinstance(e, Carried) and self.table is not None:
                out[id(e)] = full = decode(self.table, e)
                self._pos[id(full)] = e.i
        return out

    def stored_line(self, e: Any) -> bytes | None:
        """The entry's texts.jsonl line as stored, if it is a previous entry taken over."""
        i = self._pos.get(id(e))
        if i is None:
            return None
        return self._texts_line(i)

    def owns(self, e: Any) -> bool:
        """True for an entry object taken over from the previous generation."""
        return id(e) in self._pos

    def kept_vectors(
        self,
        todo: list[Any],
        prev_vectors: Any,
        dense_chunks: Callable[[Any], list[Any]],
        partition_key: Callable[[str, str | None], str],
    ) -> dict[str, Any]:
        """New chunk id -> the previous vector of a chunk of the same entry with the same title
        and text (the embedding of an edited entry's unchanged chunks is the same), or of the
        same chunk id: an id names text, model and recipe, so a vector the files hold for it is
        the one the store lacks (a store moved to another layout: retrieval/vectors.py).
        """
        out: dict[str, Any] = {}
        if prev_vectors is not None:
            wanted: dict[str, set[str]] = {}
            for e in todo:
                ids = wanted.setdefault(partition_key(e.kind, e.repo), set())
                ids.update(c.id for c in dense_chunks(e))
            for key, ids in wanted.items():
                out.update(prev_vectors.vectors_of(key, ids))
        pairs = []
        for e in todo:
            old = self.by_id.get(e.id)
            if (
                old is None
                or self.owns(e)
                or (old.kind, old.title, old.repo) != (e.kind, e.title, e.repo)
            ):
                continue
            pairs.append((e, old))
        if not pairs or prev_vectors is None:
            return out
        self.fill(old for _, old in pairs)
        for e, old in pairs:
            have = {c.text: c.id for c in dense_chunks(old) if c.text}
            want = {c.id: have[c.text] for c in dense_chunks(e) if c.text in have}
            got = prev_vectors.vectors_of(partition_key(e.kind, e.repo), set(want.values()))
            out.update({new: got[old_id] for new, old_id in want.items() if old_id in got})
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
        if any(gen.meta.get(k) != v for k, v in meta.items()):
            return False
        if gen.meta.get("format") != FORMAT_VERSION or not self.carries:
            return False  # an older layout is written anew (vectors taken over, none embedded)
        if read_card_stats(gen) != card_stats:
            return False
        from kbase.retrieval import lexical as L

        bm25 = gen.path / "bm25"
        try:
            if (bm25 / L.TOKENIZER_FILE).read_text(encoding="utf-8").strip() != tokenizer:
                return False
        except OSError:
            return False
        if set(prev_vectors.parts) != set(by_part):
            return False
        return all(prev_vectors.ids(k) == ids for k, ids in by_part.items())


# ------------------------------------------------------------------ what the indexer asks of chunks
# Which of an entry's chunks the indexer embeds and what it asks of them, for models and for
# entries carried over undecoded alike, and the indexer's pause of the cyclic garbage collector.
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


class Chunks(Sequence[Any]):
    """Every chunk of the entries in order, each made when asked for (build_bm25 reads only
    those its token cache lacks)."""

    def __init__(self, entries: list[Any], counts: list[int]):
        self._entries = entries
        self._starts = list(itertools.accumulate(counts, initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, j: int) -> Any: ...

    @overload
    def __getitem__(self, j: slice) -> list[Any]: ...

    def __getitem__(self, j: int | slice) -> Any:
        if isinstance(j, slice):
            return [self[x] for x in range(*j.indices(len(self)))]
        if not 0 <= j < len(self):
            raise IndexError(j)
        n = bisect.bisect_right(self._starts, j) - 1
        return self._entries[n].chunks[j - self._starts[n]]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a build: a re-index allocates some 100k long-lived
    containers (columns, card signatures, the carried entries), and the collector's repeated
    passes over them took 0.5-0.9 s of a one-edit re-index (issue #11); at 6.5k entries today
    ~7% of a build that parses and tokenizes everything anew, 1.0-1.26x of a one-edit re-index
    (#24). The build makes no reference cycles of its own; reference counting frees its garbage."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
