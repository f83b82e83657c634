"""Index generations: each `kbase index` writes a complete new generation directory and
then flips the CURRENT pointer with one atomic rename. A run that dies half-way leaves
the previous generation current and usable; readers never see a half-written one."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from pydantic import TypeAdapter

from kbase.schema import Entry

# A generation's entries as a searcher holds them (issue #11): the fields a query scans over every
# entry (ids, kinds, repos, dates, tags, chunk ids, ...) as plain columns read at load, and each
# whole entry decoded from its own line of entries.jsonl when something first asks for it.
# Validating all 6.5k entries of a mined archive into models up front was 0.4 s of every cold
# `kbase search`, which then used a few dozen of them. A decoded entry is the same model the full
# load builds (the same pydantic validation of the same JSON), and stays cached.
ENTRIES = "entries.jsonl"  # one light entry (chunk texts left out) per line
COLUMNS = "columns.json"
# Column name -> how it is read off an entry (the writer's columns.json).
_COLUMNS = {
    "ids": lambda e: e.id,
    "kinds": lambda e: e.kind,
    "repos": lambda e: e.repo,
    "dates": lambda e: e.date,
    "titles": lambda e: e.title,
    "tags": lambda e: e.tags,
    "categories": lambda e: e.categories,
    "chunk_ids": lambda e: [c.id for c in e.chunks],
}


@functools.cache
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp)  # Entry or list[Entry]


class EntryTable(Sequence[Entry]):
    """Columns of every entry, and the entries themselves decoded on first access."""

    def __init__(self, columns: dict[str, list[Any]], data: bytes, offsets: list[int]):
        n = len(columns["ids"])
        if any(len(columns[c]) != n for c in _COLUMNS) or len(offsets) != n + 1:
            raise ValueError("entry columns and entries disagree in length")
        self.ids: list[str] = columns["ids"]
        self.kinds: list[str] = columns["kinds"]
        self.repos: list[str | None] = columns["repos"]
        self.dates: list[str | None] = columns["dates"]
        self.titles: list[str] = columns["titles"]
        self.tags: list[list[str]] = columns["tags"]
        self.categories: list[list[str]] = columns["categories"]
        self.chunk_ids: list[list[str]] = columns["chunk_ids"]
        self._data = data
        self._offsets = offsets
        # position -> entry; setdefault keeps one object per entry when threads race
        self._decoded: dict[int, Entry] = {}

    def line(self, i: int) -> bytes:
        """Entry i's stored entries.jsonl line, without its newline."""
        return self._data[self._offsets[i] : self._offsets[i + 1] - 1]

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> Entry: ...

    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        got = self._decoded.get(i)
        if got is None:
            if not 0 <= i < len(self):
                raise IndexError(i)
            got = self._decoded.setdefault(i, _adapter(Entry).validate_json(self.line(i)))
        return got

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.all())

    def all(self) -> list[Entry]:
        """Every entry (one validation pass over the rest when most are still undecoded)."""
        if len(self._decoded) < len(self):
            # validated in one pass, as one JSON array
            body = self._data.rstrip(b"\n").replace(b"\n", b",")
            for i, e in enumerate(_adapter(list[Entry]).validate_json(b"[" + body + b"]")):
                self._decoded.setdefault(i, e)
        return [self._decoded[i] for i in range(len(self))]


POINTER = "CURRENT"
# 2: entries.jsonl and columns.json (EntryTable). A generation of another format
# (an index written by an earlier kbase) reads as none: the next `kbase index` builds anew.
FORMAT_VERSION = 2


@dataclass
class Generation:
    gen_id: str
    path: Path
    meta: dict
    # an EntryTable (entries decoded when first used), or a list when loaded with their texts
    entries: Sequence[Entry]
    texts: ChunkTexts  # where the chunk texts are read from, for the entries that need them


TEXTS = "texts.jsonl"
TEXT_OFFSETS = "texts.idx.json"
_NO_TEXT = {"chunks": {"__all__": {"text"}}}  # of one entry


class ChunkTexts:
    """The chunk texts of one generation, one JSON line per entry, read only for the entries a
    search returns: a cold search then validates the entries without their texts (a fifth of the
    bytes of a mined archive's index)."""

    def __init__(self, path: Path):
        self.path = path

    @functools.cached_property
    def _offsets(self) -> list[int]:
        return json.loads((self.path / TEXT_OFFSETS).read_bytes())

    def lines(self) -> list[bytes]:
        """Every entry's line of texts.jsonl, as stored (the indexer copies the lines of
        unchanged entries instead of decoding and encoding them again)."""
        return (self.path / TEXTS).read_bytes().splitlines(keepends=True)  # JSON has no raw \n

    def fill(self, pairs: list[tuple[int, Entry]]) -> None:
        """Give each (position, entry) its chunk texts, where they are still missing."""
        todo = [(i, e) for i, e in pairs if e.chunks and not any(c.text for c in e.chunks)]
        if not todo:
            return
        with open(self.path / TEXTS, "rb") as fh:
            for i, e in sorted(todo, key=lambda p: p[0]):
                fh.seek(self._offsets[i])
                texts = json.loads(fh.readline())
                for c, t in zip(e.chunks, texts, strict=False):
                    c.text = t


def gens_dir(home: Path) -> Path:
    return home / "gens"


def current_id(home: Path) -> str | None:
    try:
        return (home / POINTER).read_text().strip() or None
    except FileNotFoundError:
        return None


def current_meta(home: Path) -> dict | None:
    """meta.json of the current generation, without loading it; None when there is none."""
    gid = current_id(home)
    try:
        return json.loads((gens_dir(home) / gid / "meta.json").read_text()) if gid else None
    except (OSError, ValueError):
        return None


def pointer_stamp(home: Path) -> tuple[int, int] | None:
    """Cheap change detector for readers: (mtime_ns, inode) of the pointer file."""
    try:
        st = (home / POINTER).stat()
        return (st.st_mtime_ns, st.st_ino)
    except FileNotFoundError:
        return None


def load_generation(home: Path, full: bool = False) -> Generation | None:
    """The generation with its entries as an EntryTable (each decoded when first used) and its
    chunk texts left out (filled on demand through Generation.texts), as a searcher and the
    indexer hold it. `full`: every entry decoded, with its chunk texts (tests, benchmarks)."""
    gid = current_id(home)
    if not gid:
        return None
    path = gens_dir(home) / gid
    try:
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("format") != FORMAT_VERSION:
            return None
        cols = json.loads((path / COLUMNS).read_bytes())
        table = EntryTable(cols, (path / ENTRIES).read_bytes(), cols["offsets"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    texts = ChunkTexts(path)
    if not full:
        return Generation(gid, path, meta, table, texts)
    entries = table.all()
    texts.fill(list(enumerate(entries)))
    return Generation(gid, path, meta, entries, texts)


CARD_STATS = "card_stats.json"


def read_card_stats(gen: Generation | None) -> dict[str, list[int]]:
    """path -> [size, mtime_ns, inode] of each PR card when that generation read it."""
    if gen is None:
        return {}
    try:
        return json.loads((gen.path / CARD_STATS).read_bytes())
    except (OSError, ValueError):
        return {}


def write_card_stats(path: Path, stats: dict[str, list[int]]) -> None:
    (path / CARD_STATS).write_text(json.dumps(stats), "ascii")


def new_generation_dir(home: Path) -> tuple[str, Path]:
    gid = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 10**6:06d}"
    path = gens_dir(home) / (gid + ".tmp")
    path.mkdir(parents=True)
    return gid, path


def write_entries(path: Path, entries: Sequence[Any], meta: dict, prevs: Any) -> None:
    """`entries`: models, or Carried entries of `prevs` (build_stages.Previous), whose table holds
    their stored lines and column values; prevs.stored_line(entry): the texts line of an entry
    taken over unchanged (its texts may not be loaded), else None."""
    from kbase.retrieval.build_stages import Carried, write_carry

    table: EntryTable | None = prevs.table

    # The entries without their chunk texts, one line each (serialized by pydantic's core: the
    # pure-Python encoder took seconds for thousands of PR cards), the columns a search scans
    # over all of them, and the texts one line per entry: a searcher reads the columns, and the
    # lines of the entries and texts it returns; a full load joins them. A Carried entry's
    # line and column values are copied as stored (decoding and encoding them again was most of
    # an incremental re-index).
    carried = [isinstance(e, Carried) for e in entries]
    fresh = [e for e, c in zip(entries, carried, strict=True) if not c]
    dump = _adapter(Entry).dump_json  # pydantic never writes a raw newline inside a line
    dumped = iter([dump(e, exclude=_NO_TEXT) for e in fresh])
    rows = [
        table.line(e.i) if c and table is not None else next(dumped)
        for e, c in zip(entries, carried, strict=True)
    ]
    (path / ENTRIES).write_bytes(b"".join(row + b"\n" for row in rows))
    ends = [0, *itertools.accumulate(len(row) + 1 for row in rows)]
    cols = {name: [get(e) for e in fresh] for name, get in _COLUMNS.items()}
    if table is not None and len(fresh) < len(entries):
        for name, values in cols.items():
            stored, got = getattr(table, name), iter(values)  # a column of the table
            cols[name] = [
                stored[e.i] if c else next(got) for e, c in zip(entries, carried, strict=True)
            ]
    (path / COLUMNS).write_text(json.dumps({**cols, "offsets": ends}), "ascii")
    write_carry(path, list(entries))
    lines = [
        prevs.stored_line(e)
        or json.dumps([c.text for c in e.chunks], ensure_ascii=False).encode() + b"\n"
        for e in entries
    ]
    offsets = [0, *itertools.accumulate(len(line) for line in lines)][:-1]
    (path / TEXTS).write_bytes(b"".join(lines))
    (path / TEXT_OFFSETS).write_text(json.dumps(offsets), "ascii")
    (path / "meta.json").write_text(json.dumps({**meta, "format": FORMAT_VERSION}, indent=1))


def publish(home: Path, gid: str, tmp_path: Path) -> None:
    os.replace(tmp_path, gens_dir(home) / gid)
    ptr_tmp = home / f".{POINTER}.{os.getpid()}"
    ptr_tmp.write_text(gid)
    os.replace(ptr_tmp, home / POINTER)
    # Keep the previous generation too: a reader that loaded it a moment ago may still
    # be mapping vector hits onto it.
    gens = sorted(p for p in gens_dir(home).iterdir() if p.is_dir())
    finished = [p for p in gens if not p.name.endswith(".tmp")]
    for p in finished[:-2]:
        if p.name != gid:
            shutil.rmtree(p, ignore_errors=True)
    for p in gens:
        if p.name.endswith(".tmp") and time.time() - p.stat().st_mtime > 3600:
            shutil.rmtree(p, ignore_errors=True)  # left by a run that died long ago


@contextlib.contextmanager
def writer_lock(home: Path):
    """One writer per home at a time; a second `kbase index` waits for the first."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "index.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when fh closes
        yield
