"""The Python API: `KnowledgeBase(root=...).index()`, `.search(query)`, `.get(id)`."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from kbase.config import Settings, default_model_path, model_installed
from kbase.schema import EntryDoc, Hit, SectionText

PR_STATUS = "mined"  # PR cards are facts read from git, not claims to verify
DEMOTED = {"failing"}


class NotIndexed(RuntimeError):
    pass


class KnowledgeBase:
    def __init__(
        self,
        root: str | os.PathLike | None = None,
        home: str | os.PathLike | None = None,
        model_path: str | None = None,
        chroma_url: str | None = None,
    ):
        self.settings = Settings.load(
            root=root, home=home, model_path=model_path, chroma_url=chroma_url
        )
        self._embedder = None
        self._query_embedder = None
        self._searcher = None

    # ------------------------------------------------------------------ plumbing
    @property
    def root(self) -> Path:
        return self.settings.root

    @property
    def home(self) -> Path:
        return self.settings.home

    def embedder(self):
        if self._embedder is None:
            from kbase.retrieval.embed import get_embedder

            self._embedder = get_embedder(self.settings.model_path or default_model_path())
        return self._embedder

    def query_embedder(self):
        """ONNX Runtime when home/onnx matches the model (no torch import: fast CLI searches), else the torch model."""
        if self._query_embedder is None:
            from kbase.retrieval.onnx_query import load_query_embedder

            # A base install has no model, only the index's ONNX export of it ("" says so).
            model_path = self.settings.model_path or (
                default_model_path() if model_installed() else ""
            )
            self._query_embedder = load_query_embedder(self.home, model_path) or self.embedder()
        return self._query_embedder

    def vector_store(self):
        from kbase.retrieval.vectors import VectorStore

        return VectorStore(self.home, self.settings.chroma_url)

    def searcher(self):
        if self._searcher is None:
            from kbase.retrieval.searcher import Searcher

            self._searcher = Searcher(self.home, self.vector_store, self.query_embedder)
        return self._searcher

    def is_indexed(self) -> bool:
        from kbase.retrieval.generations import current_id

        return current_id(self.home) is not None

    def warm_up(self) -> None:
        """Load the model, the index and the vector store now, not on the first query."""
        self.query_embedder().embed_query("warm up")
        if self.searcher().index() is not None:
            self.searcher().store().count()
        self.statuses()  # parses every skill and reads the ledger once; later calls hit its cache

    # ------------------------------------------------------------------ index
    def index(self, progress: Callable[[str, int, int], None] | None = None, gc: bool = True):
        from kbase.retrieval.indexer import build_index

        return build_index(
            self.root, self.home, self.embedder, self.settings.chroma_url, progress=progress, gc=gc
        )

    # ------------------------------------------------------------------ status
    def statuses(self) -> dict:
        try:
            from kbase.validators.status import skill_statuses
        except ImportError:
            return {}
        try:
            return skill_statuses(self.root)
        except FileNotFoundError:
            return {}

    def _status_of(self, entry, statuses: dict) -> tuple[str, str | None, str | None]:
        if entry.kind == "pr":
            return PR_STATUS, None, None
        audit = statuses.get(entry.id)
        if audit is None:
            return "unverified", None, None
        return audit.status, audit.verified_on, audit.last_pass

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        k: int = 5,
        kind: str | None = None,
        repo: str | None = None,
        tags: list[str] | None = None,
        status: list[str] | str | None = None,
        mode: str = "hybrid",
        auto_index: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[Hit]:
        """`since`/`until` (YYYY-MM-DD, inclusive) keep only dated entries (PR cards) in that range."""
        from kbase.retrieval.searcher import make_snippet

        if not query or not query.strip():
            raise ValueError("query is empty")
        if kind not in (None, "skill", "pr"):
            raise ValueError(f"kind must be 'skill' or 'pr', got {kind!r}")
        if not self.is_indexed():
            if not auto_index:
                raise NotIndexed(f"no index under {self.home}; run `kbase index`")
            self.index()
        wanted = {status} if isinstance(status, str) else set(status or [])
        for name, day in (("since", since), ("until", until)):
            if day is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
                raise ValueError(f"{name} must be a date like 2025-01-31, got {day!r}")
        cands = self.searcher().search(
            query, k=k, kind=kind, repo=repo, tags=tags, mode=mode, since=since, until=until
        )
        statuses = self.statuses() if any(c.entry.kind == "skill" for c in cands) else {}
        hits: list[Hit] = []
        for c in cands:
            st, on, at = self._status_of(c.entry, statuses)
            if wanted and st not in wanted:
                continue
            chunk = c.entry.chunks[c.chunk_index] if c.entry.chunks else None
            hits.append(
                Hit(
                    id=c.entry.id,
                    kind=c.entry.kind,
                    title=c.entry.title,
                    score=round(c.score, 6),
                    status=st,
                    path=c.entry.path,
                    line=chunk.line if chunk else c.entry.line,
                    section=chunk.section if chunk else "",
                    snippet=make_snippet(chunk.text, query) if chunk else "",
                    repo=c.entry.repo,
                    pr=c.entry.pr,
                    verified_on=on,
                    verified_at=at,
                )
            )
        if not wanted:
            # Failing entries stay findable but rank below healthy ones.
            hits.sort(key=lambda h: h.status in DEMOTED)
        return hits[:k]

    # ------------------------------------------------------------------ get
    def get(self, entry_id: str, section: str | None = None) -> EntryDoc:
        from kbase.ingest.files import read_text
        from kbase.ingest.markdown import parse_body, split_front_matter

        idx = self.searcher().index() if self.is_indexed() else None
        entry = None
        if idx is not None and entry_id in idx.by_id:
            entry = idx.entries[idx.by_id[entry_id]]
        if entry is None:
            entry = self._find_unindexed(entry_id)
        if entry is None:
            raise KeyError(f"no entry with id {entry_id!r}")
        path = self.root / entry.path
        text = read_text(path, self.root)
        _, body, body_line = split_front_matter(text, entry.path)
        sections, _, _ = parse_body(body, body_line)
        secs = [SectionText(title=s.title or "intro", line=s.line, text=s.text) for s in sections]
        for ch in entry.chunks:
            if ch.section in ("trigger", "steps", "failure_modes"):
                secs.append(SectionText(title=ch.section, line=ch.line, text=ch.text))
        st, on, at = self._status_of(entry, self.statuses() if entry.kind == "skill" else {})
        if section is not None:
            want = section.strip().lower()
            secs = [s for s in secs if s.title.lower() == want]
            if not secs:
                raise KeyError(f"entry {entry_id!r} has no section {section!r}")
            text = "\n\n".join(s.text for s in secs)
        return EntryDoc(
            id=entry.id,
            kind=entry.kind,
            title=entry.title,
            path=entry.path,
            status=st,
            repo=entry.repo,
            pr=entry.pr,
            tags=entry.tags,
            verified_on=on,
            verified_at=at,
            sections=secs,
            text=text,
        )

    def _find_unindexed(self, entry_id: str):
        from kbase.retrieval.indexer import collect_entries

        if entry_id.startswith("pr:"):
            entries, _, _ = collect_entries(self.root)
            return next((e for e in entries if e.id == entry_id), None)
        from kbase.ingest.markdown import DocumentError
        from kbase.ingest.skills import SKILL_FILE, load_skill, skill_entry
        from kbase.schema import NAME_RE

        if not NAME_RE.match(entry_id):
            return None
        f = self.root / "skills" / entry_id / SKILL_FILE
        if not f.exists():
            return None
        try:
            return skill_entry(load_skill(f, self.root))
        except DocumentError:
            return None
