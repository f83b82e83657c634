"""Dense vectors: Chroma as the store (embedded, or a server when KBASE_CHROMA_URL is set; given
our own embeddings, it never loads an embedding function), and each generation's vectors as numpy
files (docs/architecture.md). One collection per kind and PR repo (`<base>--skill`,
`<base>--pr--<repo>`): the common filters (kind, repo) then pick collections instead of asking
Chroma for a `where` scan, which cost several times an unfiltered query (issue #11)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

COLLECTION = "kbase_chunks"
_BATCH = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
PARTS_DIR = "chroma-parts"  # the embedded store: one Chroma directory per partition
LAYOUT = "embedded-parts"  # the generation's meta.vector_store for that layout


def _client(path: Path | None, chroma_url: str | None):
    """A client of the server at `chroma_url`, or of the embedded Chroma directory `path`."""
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    settings = ChromaSettings(anonymized_telemetry=False)
    if chroma_url:
        u = urlparse(chroma_url if "://" in chroma_url else f"http://{chroma_url}")
        host, port = u.hostname or "127.0.0.1", u.port or 8000
        return chromadb.HttpClient(host=host, port=port, ssl=u.scheme == "https", settings=settings)
    assert path is not None
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def partition_key(kind: str, repo: str | None) -> str:
    """The partition an entry's vectors live in: 'skill' or 'pr--<repo>'."""
    return kind if kind != "pr" else f"pr--{repo or '_'}"


class VectorStore:
    def __init__(self, home: Path, chroma_url: str | None = None):
        self.home = home
        self.chroma_url = chroma_url
        self._clients: dict[Path | None, Any] = {}  # by partition directory; None: the server
        # Several knowledge bases can share one Chroma server under different collection prefixes.
        self.base = os.environ.get("KBASE_CHROMA_COLLECTION") or COLLECTION
        self._cols: dict[str, Any] = {}
        self._pool: Any = None
        if chroma_url:
            self._open(None, create=True)

    # ------------------------------------------------------------ collections
    def collection_for(self, key: str) -> str:
        name = f"{self.base}--{_UNSAFE.sub('_', key)}"
        if len(name) > 60:  # Chroma caps names at 63 characters
            digest = hashlib.sha1(name.encode()).hexdigest()[:10]
            name = f"{name[:48]}-{digest}"
        return name

    def _client_for(self, key: str, create: bool) -> Any:
        if self.chroma_url:
            return self._open(None, create=True)
        return self._open(self.home / PARTS_DIR / file_stem(key), create)

    def _open(self, path: Path | None, create: bool) -> Any:
        """The client of the server (path None) or of one embedded directory, opened once; None
        for a directory holding no store unless `create`."""
        client = self._clients.get(path)
        if client is None:
            if path is not None and not create and not (path / "chroma.sqlite3").is_file():
                return None
            client = self._clients[path] = _client(path, self.chroma_url)
        return client

    def _col(self, key: str, create: bool):
        col = self._cols.get(key)
        if col is not None:
            return col
        client = self._client_for(key, create)
        if client is None:
            return None
        name = self.collection_for(key)
        if create:
            col = client.get_or_create_collection(
                name=name, embedding_function=None, metadata={"hnsw:space": "cosine"}
            )
        else:
            try:
                col = client.get_collection(name=name, embedding_function=None)
            except Exception:  # noqa: BLE001 - chromadb raises different types across versions
                return None
        self._cols[key] = col
        return col

    def close(self) -> None:
        """Release the clients: the next embedded client of a path reads its files afresh, how a
        reader picks up vectors that another process wrote (issue #11)."""
        self._cols.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        for client in self._clients.values():
            with contextlib.suppress(Exception):  # no close(), closed twice, a server gone away
                client.close()
        self._clients.clear()

    def count(self) -> int:
        return sum(c.count() for c in self._all_collections())

    def _all_collections(self) -> list:
        prefix = f"{self.base}--"
        if self.chroma_url:
            clients = [c] if (c := self._client_for("", create=False)) is not None else []
        else:
            parts = self.home / PARTS_DIR
            dirs = sorted(parts.iterdir()) if parts.is_dir() else []
            clients = [c for d in dirs if (c := self._open(d, create=False)) is not None]
        out = []
        for client in clients:
            for c in client.list_collections():
                name = c if isinstance(c, str) else c.name
                if name.startswith(prefix):
                    out.append(client.get_collection(name=name, embedding_function=None))
        return out

    # ------------------------------------------------------------ writes
    def _get(self, key: str, ids: list[str], include: list) -> list[dict]:
        """Chroma's get() of these ids, a batch at a time ([] for a partition it lacks)."""
        col = self._col(key, create=False)
        if col is None:
            return []
        return [
            col.get(ids=ids[i : i + _BATCH], include=include) for i in range(0, len(ids), _BATCH)
        ]

    def existing_ids(self, key: str, ids: list[str]) -> set[str]:
        return {i for got in self._get(key, ids, []) for i in got["ids"]}

    def get_vectors(self, key: str, ids: list[str]) -> dict[str, list[float]]:
        """chunk id -> stored vector, for the ids this partition holds."""
        got = self._get(key, ids, ["embeddings"])
        return {i: v for g in got for i, v in zip(g["ids"], g["embeddings"], strict=True)}

    def upsert(self, key: str, ids: list[str], vectors, metadatas: list[dict] | None) -> None:
        col = self._col(key, create=True)
        # one float32 array: Chroma converts lists of Python floats element by element
        vectors = np.asarray(vectors, dtype=np.float32)
        for i in range(0, len(ids), _BATCH):
            part = slice(i, i + _BATCH)
            meta = metadatas[part] if metadatas is not None else None
            col.upsert(ids=ids[part], embeddings=vectors[part], metadatas=meta)

    def delete(self, key: str, ids: Iterable[str]) -> None:
        col = self._col(key, create=False)
        ids = list(ids)
        if col is None or not ids:
            return
        for i in range(0, len(ids), _BATCH):
            col.delete(ids=ids[i : i + _BATCH])

    # ------------------------------------------------------------ reads
    def submit_each(
        self, vector: list[float], asks: Iterable[tuple[str, int, dict | None]], background=True
    ) -> Callable[[], list[tuple[str, float]]]:
        """(chunk id, cosine similarity) best first: n hits of each (partition, n, where), asked
        on the store's threads; call the result for the rows (it raises what the query raised).
        background=False: one partition is asked in this thread."""
        todo = [(c, n, w) for key, n, w in asks if (c := self._col(key, create=False)) is not None]

        def one(ask) -> list[tuple[str, float]]:
            col, n, where = ask
            # chromadb >= 1.5 caps n_results at the collection size itself; asking count()
            # first would cost a round trip per query against a server.
            res = col.query(
                query_embeddings=[vector], n_results=n, where=where or None, include=["distances"]
            )
            if not res["ids"]:
                return []
            return [
                (cid, 1.0 - float(d))
                for cid, d in zip(res["ids"][0], res["distances"][0], strict=True)
            ]

        if len(todo) > 1 or (todo and background):
            # Several large partitions (an unfiltered query at 100k entries): Chroma answers
            # them in parallel, its HNSW search runs outside the GIL.
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbase-chroma")
            futures = [self._pool.submit(one, a) for a in todo]

            def wait() -> list[tuple[str, float]]:
                return sorted((r for f in futures for r in f.result()), key=lambda r: -r[1])

            return wait
        rows = sorted((r for a in todo for r in one(a)), key=lambda r: -r[1])
        return lambda: rows


# ----------------------------------------------------------------------------- vector files
# One file per partition and generation: a cold search scores a small partition with one matrix
# product instead of importing chromadb (most of a cold search), and the indexer learns which
# vectors exist, and takes them over, without asking Chroma for every id (issue #11). A published
# generation's files never change: a reader's view stays consistent while another re-indexes.
VEC_DIR = "vectors"
INDEX = "index.json"
FORMAT = 1
_UNSAFE_STEM = re.compile(r"[^A-Za-z0-9_.-]+")


def file_stem(key: str) -> str:
    safe = _UNSAFE_STEM.sub("_", key)
    return f"{safe[:60]}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


class GenVectors:
    """Read side: the vectors of one generation, loaded per partition on first use (mmap)."""

    def __init__(self, gen_path: Path):
        self.dir = gen_path / VEC_DIR
        try:
            meta = json.loads((self.dir / INDEX).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        self.ok = meta.get("format") == FORMAT
        self.parts: dict[str, dict] = meta.get("partitions", {}) if self.ok else {}
        self.dim = int(meta.get("dim") or 0)
        self._mats: dict[str, np.ndarray] = {}
        self._ids: dict[str, list[str]] = {}

    def rows(self, key: str) -> int:
        return int(self.parts.get(key, {}).get("rows", 0))

    def matrix(self, key: str) -> np.ndarray:
        if key not in self._mats:
            stem = self.parts[key]["stem"]
            self._mats[key] = np.load(self.dir / f"{stem}.npy", mmap_mode="r")
        return self._mats[key]

    def ids(self, key: str) -> list[str]:
        if key not in self._ids:
            stem = self.parts[key]["stem"]
            self._ids[key] = json.loads((self.dir / f"{stem}.ids.json").read_bytes())
        return self._ids[key]

    def all_ids(self, key: str) -> set[str]:
        return set(self.ids(key)) if key in self.parts else set()

    def vectors_of(self, key: str, wanted: Iterable[str]) -> dict[str, np.ndarray]:
        if key not in self.parts:
            return {}
        pos = {cid: i for i, cid in enumerate(self.ids(key))}
        m = self.matrix(key)
        return {cid: np.asarray(m[pos[cid]]) for cid in wanted if cid in pos}


def top_entries(
    parts: list[tuple[np.ndarray, np.ndarray]],
    q: np.ndarray,
    chunk_entry: np.ndarray,
    mask: np.ndarray | None,
    n: int,
) -> list[tuple[int, int, float]]:
    """Exact cosine search over partitions given as (matrix, chunk position of each row; -1
    for a row the generation does not know): [(entry, chunk position, similarity)], best first,
    one row per entry, at most n, entries outside the mask left out."""
    sims_l, pos_l = [], []
    for m, pos in parts:
        if m.shape[0] == 0:
            continue
        # 512 rows per product: a larger matrix-vector product makes the BLAS start its
        # threads, which on a busy 2-core machine was ~8x slower than staying on one.
        sims = np.concatenate([m[i : i + 512] @ q for i in range(0, m.shape[0], 512)])
        ok = pos >= 0
        if mask is not None:
            ok &= mask[chunk_entry[np.maximum(pos, 0)]]
        sims_l.append(sims[ok])
        pos_l.append(pos[ok])
    if not sims_l:
        return []
    sims = np.concatenate(sims_l)
    pos = np.concatenate(pos_l)
    take = min(len(sims), n * 4)  # chunk rows enough for n entries, mostly
    top = np.argpartition(-sims, take - 1)[:take] if take < len(sims) else np.arange(len(sims))
    top = top[np.argsort(-sims[top], kind="stable")]
    top = top[first_of_each(chunk_entry[pos[top]])[:n]]
    best = pos[top]
    return list(zip(chunk_entry[best].tolist(), best.tolist(), sims[top].tolist(), strict=True))


def first_of_each(keys: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct key, in order: a Python loop with a
    set over the best chunks was ~1 ms of a query at 100k entries (issue #11). Not np.unique:
    it imports numpy.ma, ~15 ms of a cold search."""
    by_key = np.argsort(keys, kind="stable")
    k = keys[by_key]
    starts = np.ones(len(k), dtype=bool)
    starts[1:] = k[1:] != k[:-1]
    return np.sort(by_key[starts])


def assemble_generation_vectors(
    tmp: Path,
    by_part: dict[str, list[str]],
    fresh: dict[str, Any],
    prev: GenVectors | None,
    store: Callable[[], Any],
) -> None:
    """The new generation's vector files: a partition whose ids are those of the previous
    generation and got nothing new is copied; the others are assembled from this run's
    vectors, the previous files and, for what neither holds, Chroma. A partition that cannot
    be completed gets no file (its searches go to Chroma)."""
    parts: dict[str, tuple[list[str], Any]] = {}
    dim = 0
    for key, ids in by_part.items():
        if prev is not None and key in prev.parts and prev.ids(key) == ids:
            if not any(i in fresh for i in ids):
                parts[key] = (ids, prev.matrix(key))
                dim = dim or prev.dim
                continue
        got: dict[str, Any] = {i: fresh[i] for i in ids if i in fresh}
        if prev is not None and len(got) < len(ids):
            got.update(prev.vectors_of(key, (i for i in ids if i not in got)))
        if len(got) < len(ids):
            got.update(store().get_vectors(key, [i for i in ids if i not in got]))
        if len(got) < len(ids):
            continue
        mat = np.zeros((0, dim or 1), dtype=np.float32)
        if ids:
            mat = np.stack([np.asarray(got[i], dtype=np.float32) for i in ids])
            dim = dim or mat.shape[1]
        parts[key] = (ids, mat)
    d = tmp / VEC_DIR
    d.mkdir(parents=True, exist_ok=True)
    index: dict[str, dict] = {}
    for key, (ids, vecs) in sorted(parts.items()):
        stem = file_stem(key)
        np.save(d / f"{stem}.npy", np.ascontiguousarray(vecs, dtype=np.float32))
        (d / f"{stem}.ids.json").write_text(json.dumps(ids), "ascii")
        index[key] = {"stem": stem, "rows": len(ids)}
    meta = {"format": FORMAT, "dim": dim, "partitions": index}
    (d / INDEX).write_text(json.dumps(meta), encoding="utf-8")
