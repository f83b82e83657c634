"""Chroma as the vector store: embedded PersistentClient by default, a server when
KBASE_CHROMA_URL is set. We always pass our own embeddings, so Chroma never loads
(or downloads) an embedding function of its own.

Vectors are partitioned into one collection per kind and PR repo (`<base>--skill`,
`<base>--pr--<repo>`): the common filters (kind, repo) then pick collections instead of asking
Chroma for a `where` scan, which cost several times an unfiltered query (issue #11).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from kbase.retrieval.vector_files import file_stem

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
        return chromadb.HttpClient(
            host=u.hostname or "127.0.0.1",
            port=u.port or 8000,
            ssl=u.scheme == "https",
            settings=settings,
        )
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
        # the server's client, or one embedded client per partition directory opened so far
        self._clients: dict[Path | None, Any] = {}  # by directory; None: the server
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
        for a directory holding no store when not asked to create one (a reader never does)."""
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
        """Release the client. An embedded client shares one in-process Chroma system per path;
        when the last one closes, the system stops, and the next client reads the files afresh:
        how a reader picks up vectors that another process wrote (issue #11)."""
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

    def upsert(
        self, key: str, ids: list[str], vectors, metadatas: list[dict[str, Any]] | None
    ) -> None:
        col = self._col(key, create=True)
        # one float32 array: Chroma converts lists of Python floats element by element
        vectors = np.asarray(vectors, dtype=np.float32)
        for i in range(0, len(ids), _BATCH):
            col.upsert(
                ids=ids[i : i + _BATCH],
                embeddings=vectors[i : i + _BATCH],
                metadatas=metadatas[i : i + _BATCH] if metadatas is not None else None,
            )

    def delete(self, key: str, ids: Iterable[str]) -> None:
        col = self._col(key, create=False)
        ids = list(ids)
        if col is None or not ids:
            return
        for i in range(0, len(ids), _BATCH):
            col.delete(ids=ids[i : i + _BATCH])

    # ------------------------------------------------------------ reads
    def submit_each(
        self,
        vector: list[float],
        asks: Iterable[tuple[str, int, dict[str, Any] | None]],
        background: bool = True,
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
                query_embeddings=[vector],
                n_results=n,
                where=where or None,
                include=["distances"],
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
