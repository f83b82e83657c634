"""An on-disk cache of each commit's facts and the card they made under a recipe, in one SQLite
file whose `version` row names the grammars and the code (docs/pr-archive.md "Incremental runs").
An accelerator only: any error reading or writing it is swallowed, the mine runs without it."""

from __future__ import annotations

import contextlib
import marshal
import os
import platform
import sqlite3
import zlib
from pathlib import Path
from typing import Any

CACHE_FILE = "mine-defs.sqlite"
# the code that decides a commit's facts and the card built from them (with the tag vocabulary)
_CODE = [f"kbase.ingest.{m}" for m in "definitions brace_scan change_symbols gitlog logrun".split()]
_CODE += [f"kbase.ingest.{m}" for m in "card_build classify".split()]
_CODE += [f"kbase.{m}" for m in "schema closed_sets search_query".split()]
_GRAMMARS = ("tree-sitter", "tree-sitter-cuda", "tree-sitter-python")


def code_version() -> str:
    """A digest of that code, the grammars' versions, and Python's and pydantic's (the regex
    engine and the validators are part of the code too)."""
    from importlib import metadata

    from kbase.retrieval.collect import source_digest
    from pydantic.version import VERSION

    versions = [f"python={platform.python_version()}", f"pydantic={VERSION}"]
    for dist in _GRAMMARS:
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=none")
    return source_digest(_CODE, ["vocab.yaml"], prefix=";".join(versions), length=20)


class MineCache:
    """Values by key in one table: commit facts under `commit:<sha>`, cards under
    `card:<card_build.card_key>`. Writes are batched and committed by `flush`."""

    def __init__(self, path: Path):
        self._db: sqlite3.Connection | None = None
        self._new: list[tuple[str, bytes]] = []
        with contextlib.suppress(sqlite3.Error, OSError):  # the mine runs without a cache
            path.parent.mkdir(parents=True, exist_ok=True)
            version = code_version()
            try:
                self._db = self._open(path, version)
            except sqlite3.OperationalError:  # locked by another mine past the timeout, ...
                pass
            except sqlite3.DatabaseError:
                # not a database, or damaged (a power cut while the OS held unwritten pages): a
                # cache may be lost, so a new one replaces it
                _remove(path)
                self._db = self._open(path, version)

    @staticmethod
    def _open(path: Path, version: str) -> sqlite3.Connection:
        db = sqlite3.connect(str(path), timeout=5, isolation_level=None)
        try:
            # synchronous=OFF: no fsync (the checkpoint when the last connection closes cost ~0.1 s
            # of every mine, most of an incremental one's I/O wait); a killed process loses
            # nothing (the OS holds its writes); a power cut can lose or damage the cache, never
            # a card: every value is zlib-checked (adler32) and keyed by immutable ids, a damaged
            # file is replaced (above), and nothing that fails to decode is read from it
            db.executescript(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;"
                "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT);"
                "CREATE TABLE IF NOT EXISTS items (k TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID"
            )
            row = db.execute("SELECT v FROM meta WHERE k = 'version'").fetchone()
            if row is None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (version,))
            elif row[0] != version:
                # rows of other extractor code go with their file, not by DELETE: a file then
                # only ever holds rows of one version, so pages the OS never wrote (no fsync,
                # above) can lose rows but never bring back another version's
                db.close()
                _remove(path)
                return MineCache._open(path, version)
        except BaseException:
            db.close()
            raise
        return db

    def get(self, key: str) -> Any:
        """The value under `key`; None if absent or damaged."""
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT data FROM items WHERE k = ?", (key,)).fetchone()
            return marshal.loads(zlib.decompress(row[0])) if row else None
        except (sqlite3.Error, ValueError, EOFError, TypeError, zlib.error):
            return None

    def put(self, key: str, value: Any) -> None:
        if self._db is not None:
            self._new.append((key, zlib.compress(marshal.dumps(value), 1)))

    def flush(self) -> None:
        if self._db is not None and self._new:
            try:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO items VALUES (?, ?)", self._new)
                self._db.execute("COMMIT")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
        self._new.clear()

    def close(self) -> None:
        self.flush()
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None


def _remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)


def open_cache(root: Path) -> MineCache | None:
    """The cache of a knowledge-base root (in its `.kbase/`); None when KBASE_MINE_CACHE=0."""
    if os.environ.get("KBASE_MINE_CACHE", "1") == "0":
        return None
    return MineCache(root / ".kbase" / "cache" / CACHE_FILE)
