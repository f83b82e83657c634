"""Chroma as the vector store: embedded PersistentClient by default, a server when
KBASE_CHROMA_URL is set. We always pass our own embeddings, so Chroma never loads
(or downloads) an embedding function of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

COLLECTION = "kbase_chunks"
_BATCH = 1000


def _client(home: Path, chroma_url: str | None):
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
    home.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(home / "chroma"), settings=settings)


class VectorStore:
    def __init__(self, home: Path, chroma_url: str | None = None, collection: str | None = None):
        self.client = _client(home, chroma_url)
        # Several knowledge bases can share one Chroma server under different collection names.
        collection = collection or os.environ.get("KBASE_CHROMA_COLLECTION") or COLLECTION
        self.collection_name = collection
        self.col = self.client.get_or_create_collection(
            name=collection, embedding_function=None, metadata={"hnsw:space": "cosine"}
        )

    def count(self) -> int:
        return self.col.count()

    def existing_ids(self, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(ids), _BATCH):
            got = self.col.get(ids=ids[i : i + _BATCH], include=[])
            found.update(got["ids"])
        return found

    def all_ids(self) -> set[str]:
        out: set[str] = set()
        offset = 0
        while True:
            got = self.col.get(include=[], limit=5000, offset=offset)
            if not got["ids"]:
                return out
            out.update(got["ids"])
            offset += len(got["ids"])

    def upsert(self, ids: list[str], vectors, metadatas: list[dict[str, Any]]) -> None:
        for i in range(0, len(ids), _BATCH):
            self.col.upsert(
                ids=ids[i : i + _BATCH],
                embeddings=[list(map(float, v)) for v in vectors[i : i + _BATCH]],
                metadatas=metadatas[i : i + _BATCH],
            )

    def delete(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        for i in range(0, len(ids), _BATCH):
            self.col.delete(ids=ids[i : i + _BATCH])

    def query(
        self, vector: list[float], n: int, where: dict[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """(chunk id, cosine similarity) best first."""
        # chromadb >= 1.5 caps n_results at the collection size itself; asking count() first
        # would cost a round trip per query against a server.
        res = self.col.query(
            query_embeddings=[vector], n_results=n, where=where or None, include=["distances"]
        )
        if not res["ids"]:
            return []
        return [
            (cid, 1.0 - float(d))
            for cid, d in zip(res["ids"][0], res["distances"][0], strict=False)
        ]
