"""An on-disk cache of parsed definitions, keyed by blob id: a re-mine, a `--full` mine, a
mine of another branch or clone into the same root reads what an earlier run parsed
instead of parsing it again. Beside it: what each file change's lines were named (by its
blobs and hunks) and each commit's facts (by commit id), so a re-mine of commits mined
before neither parses nor asks git for their diffs; and the card each commit's facts made
under a recipe (ingest/card_build.py), so a re-mine does not build them again either.

A blob's definitions depend only on its bytes, the language, the grammars and our own
extraction code; the cache is one SQLite file whose `version` row names all of those,
so a new grammar or an edited extractor empties it. The cache is an accelerator only:
any error reading or writing it is swallowed and the mine parses as if it were absent.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from kbase.ingest.definitions import FileDefs, Span

CACHE_FILE = "mine-defs.sqlite"
# the modules whose code decides what a blob's definitions are, and a commit's facts
_EXTRACTORS = (
    "definitions.py",
    "brace_scan.py",
    "change_symbols.py",
    "tree_parse.py",
    "gitlog.py",
    "symbols.py",
    "logrun.py",
)
_GRAMMARS = ("tree-sitter", "tree-sitter-cpp", "tree-sitter-cuda", "tree-sitter-python")

Defs = tuple[FileDefs, FileDefs | None]
# the scanner's definitions of a blob whose parse has ERROR regions, not computed yet: most
# changes never touch those regions, so the scan runs when one does
SCAN_PENDING = FileDefs(method="scanner")


def code_version() -> str:
    """A digest of the grammars' versions and our extractors' source."""
    h = hashlib.sha256()
    for dist in _GRAMMARS:
        h.update(f"{dist}={dist_version(dist) or 'none'};".encode())
    here = Path(__file__).resolve().parent
    for name in _EXTRACTORS:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:20]


def dist_version(dist: str) -> str | None:
    """The installed version of distribution `dist` (None: not installed). An installer names
    the folder of a distribution's metadata `<name>-<version>.dist-info`, beside its package:
    that name is read when the package's folder has exactly one. importlib.metadata answers
    otherwise (an editable or egg install, say); importing it (with email, csv and zipfile)
    and reading the METADATA files was ~20 ms of every incremental mine's CPU (issue #12)."""
    from importlib.util import find_spec

    name = dist.replace("-", "_")
    spec = find_spec(name)
    if spec is not None and spec.origin:
        found = list(Path(spec.origin).parent.parent.glob(f"{name}-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len(name) + 1 : -len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def pack_defs(fd: FileDefs) -> tuple:
    return (
        fd.method,
        fd.balanced,
        [(s.start, s.end, s.name, s.kind) for s in fd.spans],
        list(fd.errors),
    )


def unpack_defs(t: tuple) -> FileDefs:
    method, balanced, spans, errors = t
    fd = FileDefs(
        spans=[Span(*s) for s in spans],
        errors=[(a, b) for a, b in errors],
        method=method,
        balanced=balanced,
    )
    return fd.finish()


def encode(defs: Defs) -> bytes:
    ts, scan = defs
    packed = "pending" if scan is SCAN_PENDING else (pack_defs(scan) if scan else None)
    return zlib.compress(marshal.dumps((pack_defs(ts), packed)), 1)


def decode(data: bytes) -> Defs:
    ts, scan = marshal.loads(zlib.decompress(data))
    if scan == "pending":
        return unpack_defs(ts), SCAN_PENDING
    return unpack_defs(ts), (unpack_defs(scan) if scan is not None else None)


class DefsCache:
    """get/put by (blob id, language); writes are batched and committed by `flush`."""

    def __init__(self, path: Path):
        self.path = path
        self.hits = 0
        self.misses = 0
        self._db: sqlite3.Connection | None = None
        self._new: list[tuple[str, str, bytes]] = []
        self._new_changes: list[tuple[str, bytes]] = []
        self._new_commits: list[tuple[str, bytes]] = []
        self._new_cards: list[tuple[str, bytes]] = []
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._open(path, code_version())
        except sqlite3.OperationalError:  # locked by another mine past the timeout, ...
            self._db = None
        except sqlite3.DatabaseError:
            # not a database, or damaged (a power cut while the OS held unwritten pages): a
            # cache may be lost, so a new one replaces it
            try:
                _remove(path)
                self._db = self._open(path, code_version())
            except (sqlite3.Error, OSError):
                self._db = None
        except (sqlite3.Error, OSError):
            self._db = None

    @staticmethod
    def _open(path: Path, version: str) -> sqlite3.Connection:
        db = sqlite3.connect(str(path), timeout=5, isolation_level=None)
        try:
            row = _version_row(db)
            if row is not None and row[0] != version:
                # rows of other extractor code go with their file, not by DELETE: a file then
                # only ever holds rows of one version, so pages the OS never wrote (no fsync,
                # below) can lose rows but never bring back another version's
                db.close()
                _remove(path)
                db = sqlite3.connect(str(path), timeout=5, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            # no fsync (the checkpoint when the last connection closes cost ~0.1 s of every
            # mine, most of an incremental one's I/O wait): a killed process loses nothing (its
            # writes are in the OS's cache); a power cut can lose or damage the cache, never a
            # card: every value is zlib-checked (adler32) and keyed by immutable ids, a damaged
            # file is replaced (above), and nothing is read from it that fails to decode
            db.execute("PRAGMA synchronous=OFF")
            db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS defs (blob TEXT, lang TEXT, data BLOB, "
                "PRIMARY KEY (blob, lang)) WITHOUT ROWID"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS changes (k TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS commits (sha TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS cards (k TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID"
            )
            if _version_row(db) is None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (version,))
        except BaseException:
            db.close()
            raise
        return db

    def get(self, blob: str, lang: str) -> Defs | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute(
                "SELECT data FROM defs WHERE blob = ? AND lang = ?", (blob, lang)
            ).fetchone()
            got = decode(row[0]) if row else None
        except (sqlite3.Error, ValueError, EOFError, TypeError, zlib.error):
            got = None
        if got is None:
            self.misses += 1
        else:
            self.hits += 1
        return got

    def put(self, blob: str, lang: str, defs: Defs) -> None:
        if self._db is not None:
            self._new.append((blob, lang, encode(defs)))

    def get_change(self, key: str) -> tuple | None:
        """What one file change's changed lines were named (`change_key`): a re-mine reads
        this instead of decoding both blobs' whole definition tables."""
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT data FROM changes WHERE k = ?", (key,)).fetchone()
            return marshal.loads(zlib.decompress(row[0])) if row else None
        except (sqlite3.Error, ValueError, EOFError, TypeError, zlib.error):
            return None

    def put_change(self, key: str, value: tuple) -> None:
        if self._db is not None:
            self._new_changes.append((key, zlib.compress(marshal.dumps(value), 1)))

    def commits_held(self, shas: list[str]) -> set[str]:
        """Which of these commits' facts the cache holds (a commit's diff never changes)."""
        if self._db is None:
            return set()
        held: set[str] = set()
        try:
            for i in range(0, len(shas), 500):  # one query per 500 (SQLite's parameter limit)
                part = shas[i : i + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(f"SELECT sha FROM commits WHERE sha IN ({marks})", part)
                held.update(r[0] for r in rows)
        except sqlite3.Error:
            return set()
        return held

    def _packed(self, query: str, key: str) -> Any:
        """The marshalled, compressed value `query` selects for key; None if absent or bad."""
        if self._db is None:
            return None
        try:
            row = self._db.execute(query, (key,)).fetchone()
            return marshal.loads(zlib.decompress(row[0])) if row else None
        except (sqlite3.Error, ValueError, EOFError, TypeError, zlib.error):
            return None

    def get_commit(self, sha: str) -> tuple | None:
        return self._packed("SELECT data FROM commits WHERE sha = ?", sha)

    def put_commit(self, sha: str, value: tuple) -> None:
        if self._db is not None:
            self._new_commits.append((sha, zlib.compress(marshal.dumps(value), 1)))

    def use_cards(self, version: str) -> None:
        """Cards built by other code than `version` (card_build.card_version) are dropped."""
        if self._db is None:
            return
        try:
            row = self._db.execute("SELECT v FROM meta WHERE k = 'cards'").fetchone()
            if row is None or row[0] != version:
                self._db.execute("BEGIN")
                self._db.execute("DELETE FROM cards")
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('cards', ?)", (version,))
                self._db.execute("COMMIT")
        except sqlite3.Error:
            self._db = None

    def get_card(self, key: str) -> dict | None:
        """The card one commit's facts made under one recipe (`card_build.card_key`)."""
        return self._packed("SELECT data FROM cards WHERE k = ?", key)

    def put_card(self, key: str, value: dict) -> None:
        if self._db is not None:
            self._new_cards.append((key, zlib.compress(marshal.dumps(value), 1)))

    def flush(self) -> None:
        pending = self._new or self._new_changes or self._new_commits or self._new_cards
        if self._db is None or not pending:
            self._new.clear()
            self._new_changes.clear()
            self._new_commits.clear()
            self._new_cards.clear()
            return
        try:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO defs VALUES (?, ?, ?)", self._new)
            self._db.executemany("INSERT OR REPLACE INTO changes VALUES (?, ?)", self._new_changes)
            self._db.executemany("INSERT OR REPLACE INTO commits VALUES (?, ?)", self._new_commits)
            self._db.executemany("INSERT OR REPLACE INTO cards VALUES (?, ?)", self._new_cards)
            self._db.execute("COMMIT")
        except sqlite3.Error:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        self._new.clear()
        self._new_changes.clear()
        self._new_commits.clear()
        self._new_cards.clear()

    def close(self) -> None:
        self.flush()
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None


def _version_row(db: sqlite3.Connection) -> tuple | None:
    try:
        return db.execute("SELECT v FROM meta WHERE k = 'version'").fetchone()
    except sqlite3.OperationalError as exc:  # a new file: no table yet
        if "no such table" in str(exc):
            return None
        raise


def _remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)


def change_key(lang: str, old_blob: str | None, new_blob: str | None, hunks: list) -> str:
    """A file change is its two blobs and its hunks (which a diff setting could vary)."""
    digest = hashlib.blake2b(marshal.dumps([tuple(h) for h in hunks]), digest_size=12)
    return f"{old_blob or '-'}:{new_blob or '-'}:{lang}:{digest.hexdigest()}"


def open_cache(root: Path) -> DefsCache | None:
    """The cache of a knowledge-base root (under its `.kbase/`), or None when turned off with
    KBASE_MINE_CACHE=0."""
    if os.environ.get("KBASE_MINE_CACHE", "1") == "0":
        return None
    return DefsCache(root / ".kbase" / "cache" / CACHE_FILE)
