"""Index generations: each `kbase index` writes a complete new generation directory and
then flips the CURRENT pointer with one atomic rename. A run that dies half-way leaves
the previous generation current and usable; readers never see a half-written one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbase.retrieval.entry_table import (
    COLUMNS,
    ENTRIES,
    EntryTable,
    _entry_adapter,
    columns_of,
)

from kbase.schema import Entry

POINTER = "CURRENT"
# 2: entries.jsonl and columns.json (retrieval/entry_table.py). A generation of another format
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
        data = (self.path / TEXTS).read_bytes()
        ends = [*self._offsets[1:], len(data)]
        return [data[a:b] for a, b in zip(self._offsets, ends, strict=True)]

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
        table = EntryTable.read((path / COLUMNS).read_bytes(), (path / ENTRIES).read_bytes())
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


def write_entries(
    path: Path,
    entries: Sequence[Any],
    meta: dict,
    stored_line: Callable[[Any], bytes | None] | None = None,
    table: EntryTable | None = None,
) -> None:
    """`entries`: models, or Carried entries of the previous generation whose `table` holds
    their stored lines and column values (retrieval/previous.py). `stored_line(entry)`: the
    entry's texts line as a previous generation stored it, for an entry taken over unchanged (its
    texts may not be loaded), else None."""
    from kbase.retrieval.previous import Carried, write_carry

    # The entries without their chunk texts, one line each (serialized by pydantic's core: the
    # pure-Python encoder took seconds for thousands of PR cards), the columns a search scans
    # over all of them, and the texts one line per entry: a searcher reads the columns, and the
    # lines of the entries and texts it returns; a full load joins them. A Carried entry's
    # line and column values are copied as stored (decoding and encoding them again was most of
    # an incremental re-index).
    carried = [isinstance(e, Carried) for e in entries]
    if any(carried) and table is None:
        raise ValueError("carried entries need the table they were read from")
    fresh = [e for e, c in zip(entries, carried, strict=True) if not c]
    dump = _entry_adapter().dump_json  # pydantic never writes a raw newline inside a line
    dumped = iter([dump(e, exclude=_NO_TEXT) for e in fresh])
    rows = [
        table.line(e.i) if c and table is not None else next(dumped)
        for e, c in zip(entries, carried, strict=True)
    ]
    (path / ENTRIES).write_bytes(b"".join(row + b"\n" for row in rows))
    ends = [0]
    for row in rows:
        ends.append(ends[-1] + len(row) + 1)
    cols = columns_of(fresh)
    if table is not None and len(fresh) < len(entries):
        for name, values in cols.items():
            stored, got = getattr(table, name), iter(values)  # a column of the table
            cols[name] = [
                stored[e.i] if c else next(got) for e, c in zip(entries, carried, strict=True)
            ]
    (path / COLUMNS).write_text(json.dumps({**cols, "offsets": ends}), "ascii")
    write_carry(path, list(entries))
    lines, offsets, pos = [], [], 0
    for e in entries:
        line = stored_line(e) if stored_line is not None else None
        if line is None:
            line = json.dumps([c.text for c in e.chunks], ensure_ascii=False).encode() + b"\n"
        offsets.append(pos)
        pos += len(line)
        lines.append(line)
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
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
