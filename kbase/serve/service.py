"""The read-only service behind `kbase mcp` and `kbase serve`.

One object per server process: it opens the knowledge base, builds the index once at start-up
if there is none, loads the embedding model once, and answers queries without ever indexing.
Every answer comes from `KnowledgeBase`; this module adds only what a long-lived server needs
(start-up, uptime).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from kbase.errors import NotFound, NotIndexed, Unavailable
from kbase.schema import EntryDoc, SearchQuery, SearchResult

__all__ = ["NotFound", "Service", "Unavailable", "stdout_to_stderr"]

log = logging.getLogger("kbase.serve")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send anything written to fd 1 to stderr for the duration.

    Under MCP stdio, stdout is the protocol channel: a stray print or a native library's
    banner during start-up would corrupt the first frames the client reads.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class Service:
    """A KnowledgeBase held open by a server: prepared once, then asked read-only questions."""

    def __init__(self, kb: Any):
        self.kb = kb
        self.started = time.time()

    # ------------------------------------------------------------------ start-up
    @classmethod
    def open(
        cls,
        root: Any = None,
        home: Any = None,
        chroma_url: str | None = None,
        index_if_missing: bool = True,
        warm: bool = True,
    ) -> Service:
        from kbase.api import KnowledgeBase

        kb = KnowledgeBase(root=root, home=home, chroma_url=chroma_url)
        svc = cls(kb)
        svc.prepare(index_if_missing=index_if_missing, warm=warm)
        return svc

    def prepare(self, index_if_missing: bool = True, warm: bool = True) -> None:
        """Index (only when there is no index at all) and warm up, before the first request."""
        t0 = time.perf_counter()
        if not self.kb.is_indexed() and index_if_missing:
            log.info("no index under %s: indexing %s before serving", self.kb.home, self.kb.root)
            rep = self.kb.index()
            for p in rep.problems:
                log.warning("%s", p)
        if warm and self.kb.is_indexed():
            self.kb.warm_up()
        log.info(
            "kbase ready in %.1fs (root %s, home %s%s)",
            time.perf_counter() - t0,
            self.kb.root,
            self.kb.home,
            f", chroma {self.kb.settings.chroma_url}" if self.kb.settings.chroma_url else "",
        )

    # ------------------------------------------------------------------ queries
    def search(self, q: SearchQuery) -> SearchResult:
        """A server never indexes inside a request: no index is a 503, not a long wait."""
        try:
            result: SearchResult = self.kb.query(q, auto_index=False)
        except NotIndexed as exc:
            raise Unavailable(str(exc)) from None
        return result

    def get(self, entry_id: str, section: str | None = None) -> EntryDoc:
        doc: EntryDoc = self.kb.get(entry_id, section=section)
        return doc

    def stale(self) -> dict[str, Any]:
        out: dict[str, Any] = self.kb.stale().model_dump(mode="json")
        return out

    def history(self, repo: str, family: str) -> dict[str, Any]:
        """The JSON of `kbase history --json`."""
        out: dict[str, Any] = self.kb.history(repo, family).model_dump(mode="json")
        return out

    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = self.kb.health().model_dump(mode="json")
        out["uptime_s"] = round(time.time() - self.started, 1)
        return out
