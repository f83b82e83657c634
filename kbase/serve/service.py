"""The service behind `kbase mcp` and `kbase serve`: the KnowledgeBase held open, answering at
once while a missing index is built on a thread beside the server (issue #27: a client waits
~60 s for `initialize`, far less than a first build; meanwhile search is a 503 / tool error)."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from kbase.errors import TooManyWrites, Unavailable
from kbase.schema import SearchQuery, SearchResult

log = logging.getLogger("kbase.serve")


class Service:
    """A KnowledgeBase held open by a server: prepared once, then asked read-only questions."""

    def __init__(self, kb: Any):
        self.kb = kb
        self.started = time.time()
        # what the start-up thread is doing: "" once ready, else "indexing n/N" and the like
        self.state = ""
        self.failure = ""  # the start-up thread's error, if it had one
        self.thread: threading.Thread | None = None

    def start(self, index_if_missing: bool = True) -> None:
        """prepare() on a daemon thread; requests meanwhile see `state`."""
        self.state = "" if self.kb.is_indexed() or not index_if_missing else "indexing"

        def prepare() -> None:
            try:
                self.prepare(index_if_missing=index_if_missing)
            except Exception as exc:  # noqa: BLE001  (the server keeps answering, and says why)
                self.failure = f"{type(exc).__name__}: {exc}"
                log.error("start-up failed: %s", self.failure)
            finally:
                self.state = ""

        self.thread = threading.Thread(target=prepare, daemon=True, name="kbase-prepare")
        self.thread.start()

    def finish(self, wait_s: float = 10.0) -> None:
        """Called as the server stops. An interpreter that exits while the start-up thread is
        inside onnxruntime (building the query model's session) can abort: "terminate called
        without an active exception", SIGABRT (12 of 230 stdio servers whose client left at once,
        on a busy host: bench/bench_stdio_exit.py). So wait for the thread; one still busy after
        `wait_s` (indexing a large tree) is left by exiting without finalizing, as a kill would."""
        t = self.thread
        if t is None or not t.is_alive():
            return
        t.join(wait_s)
        if t.is_alive():
            log.info("start-up still running: leaving it")
            logging.shutdown()
            os._exit(0)

    def prepare(self, index_if_missing: bool = True, warm: bool = True) -> None:
        """Index (only when there is no index at all) and warm up."""
        t0, kb = time.perf_counter(), self.kb
        if not kb.is_indexed() and index_if_missing:
            log.info("no index under %s: indexing %s", kb.home, kb.root)
            self.state = "indexing"
            for p in kb.index(progress=self._progress).problems:
                log.warning("%s", p)
        self.state = ""  # with an index, a search may come before warm-up ends: it loads lazily
        if warm and kb.is_indexed():
            kb.warm_up()
        chroma = f", chroma {kb.chroma_url}" if kb.chroma_url else ""
        took = time.perf_counter() - t0
        log.info("kbase ready in %.1fs (root %s, home %s%s)", took, kb.root, kb.home, chroma)

    def _progress(self, stage: str, done: int, total: int) -> None:
        self.state = f"indexing {done}/{total} ({stage})" if total else f"indexing: {stage}"

    def search(self, q: SearchQuery) -> SearchResult:
        """A server never indexes inside a request: no index is a 503, not a long wait."""
        if self.state:
            msg = "preparing the index (first use only); retry in a few seconds"
            raise Unavailable(f"{self.state}: {msg}")
        try:
            result: SearchResult = self.kb.query(q, auto_index=False)
        except Unavailable as exc:  # no index: start-up did not build one
            why = f" (start-up failed: {self.failure})" if self.failure else ""
            raise Unavailable(f"{exc}{why}") from None
        return result

    def health(self) -> dict[str, Any]:
        # while start-up indexes, the index may be half written: say what is happening instead
        out: dict[str, Any] = self.kb.health(read_index=not self.state).model_dump(mode="json")
        out["state"] = self.state or ("failed: " + self.failure if self.failure else "ready")
        out["uptime_s"] = round(time.time() - self.started, 1)
        return out


class RateLimit:
    """At most `n` calls per `per` seconds (a sliding window), for the write tools."""

    def __init__(self, n: int = 10, per: float = 60.0):
        self.n, self.per = n, per
        self.calls: list[float] = []
        self.lock = threading.Lock()

    def take(self) -> None:
        now = time.monotonic()
        with self.lock:
            self.calls = [t for t in self.calls if now - t < self.per]
            if len(self.calls) >= self.n:
                wait = self.per - (now - self.calls[0])
                raise TooManyWrites(
                    f"write rate limit: at most {self.n} writes per {self.per:g} s; "
                    f"try again in {wait:.0f} s"
                )
            self.calls.append(now)
