"""The Python API, and the only door the CLI, HTTP and MCP go through (its search, validator and
archive methods are the mixins of kbase/api_*.py). Every answer is a model from kbase.schema;
every deliberate error is a `kbase.errors.KbaseError`."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbase.api_archive import ArchiveAPI
from kbase.api_search import SearchAPI, attrs
from kbase.api_validate import ValidateAPI
from kbase.closed_sets import KINDS, severity
from kbase.config import default_model_path, find_root
from kbase.errors import InvalidArgument, NotFound, ProblemsError, did_you_mean

if TYPE_CHECKING:  # each method imports the models it makes: a search defines no others
    from kbase.schema import EntryDoc, EntrySummary, Health, StaleReport

Progress = Callable[[str, int, int], None]


class KnowledgeBase(SearchAPI, ValidateAPI, ArchiveAPI):
    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        home: str | os.PathLike[str] | None = None,
        model_path: str | None = None,
        chroma_url: str | None = None,
        one_query: bool = False,
    ):
        """`one_query`: this process answers one search and ends (a CLI search), so the query
        model starts as fast as it can rather than answering many queries fast (retrieval/
        onnx_embed.py, prepack)."""
        self.one_query = one_query
        self.root = find_root(root)
        home = home or os.environ.get("KBASE_HOME")
        self.home = Path(home).expanduser().resolve() if home else self.root / ".kbase"
        env_url = os.environ.get("KBASE_CHROMA_URL") or None
        self.chroma_url = chroma_url if chroma_url is not None else env_url
        self._model_path = model_path  # None: default_model_path(), when first needed
        self._embedder: Any = None
        self._query_embedder: Any = None
        self._query_embedder_lock = threading.Lock()
        self._searcher: Any = None
        self.started = time.time()

    # ------------------------------------------------------------------ plumbing
    @staticmethod
    def printable(text: str) -> str:
        """`text` a snippet wrote, control characters escaped as the validators store them."""
        from kbase.validators.capture import printable

        return printable(text)

    @property
    def model_path(self) -> str:
        return self._model_path or default_model_path()

    def shipped(self) -> bool:
        """Whether the model shipped in the package embeds queries, and documents on CPU
        (retrieval/onnx_embed.py): unless KBASE_MODEL (or model_path) names a model of one's
        own, with or without the `index` extra."""
        from kbase.retrieval.onnx_embed import shipped_available

        own = self._model_path or os.environ.get("KBASE_MODEL", "shipped") != "shipped"
        return not own and shipped_available()

    def embedder(self) -> Any:
        if self._embedder is None:
            from kbase.retrieval.embed import get_embedder

            self._embedder = get_embedder(self.model_path)
        return self._embedder

    def index_embedder(self, recipe: str = "") -> Any:
        """On CPU, the shipped model through ONNX Runtime (retrieval/onnx_embed.py; `recipe`:
        onnx_embed.index_recipe(), the int8 model when it names one); else torch."""
        from kbase.retrieval.embed import default_device

        if not self.shipped() or default_device() != "cpu":
            return self.embedder()
        from kbase.retrieval.onnx_embed import cached, ensure_int8, materialize

        d = materialize(self.home)
        if recipe:
            ensure_int8(d)
        return cached(d, recipe)

    def query_embedder(self) -> Any:
        """The shipped model through ONNX Runtime (no torch import: fast CLI searches)."""
        with self._query_embedder_lock:  # a server's concurrent first searches load it once
            if self._query_embedder is None:
                if self.shipped():
                    from kbase.retrieval.onnx_embed import load_query_embedder, materialize

                    d = materialize(self.home)
                    self._query_embedder = load_query_embedder(d, prepack=not self.one_query)
                else:
                    self._query_embedder = self.embedder()
        return self._query_embedder

    def vector_store(self) -> Any:
        from kbase.retrieval.vectors import VectorStore

        return VectorStore(self.home, self.chroma_url)

    def searcher(self) -> Any:
        if self._searcher is None:
            from kbase.retrieval.searcher import Searcher

            self._searcher = Searcher(
                self.home, self.vector_store, self.query_embedder, local_vectors=not self.chroma_url
            )
        return self._searcher

    def is_indexed(self) -> bool:
        from kbase.retrieval.generations import current_id

        return current_id(self.home) is not None

    def warm_up(self) -> None:
        """Load the model, the index and the vector store now, not on the first query."""
        self.query_embedder().embed_query("warm up")
        if self.searcher().index() is not None:
            self.searcher().store().count()
        statuses = self.statuses()  # parses every skill and reads the ledger once (cached)
        from kbase.validators.claim_views import claim_views_of

        # the claim views a skill hit shows, all computed now and cached on disk in one write
        claim_views_of(self.root, sorted(statuses))

    # ------------------------------------------------------------------ index
    def index(self, progress: Progress | None = None, gc: bool = True) -> Any:
        """Build or update the index; returns retrieval.indexer.IndexReport (`.as_dict()`)."""
        from kbase.retrieval.embed import default_device
        from kbase.retrieval.indexer import build_index
        from kbase.retrieval.onnx_embed import SeededEmbedder, index_recipe

        recipe = index_recipe(self.home) if self.shipped() else ""

        def embedder() -> Any:
            if not self.shipped() or default_device() != "cpu":
                return self.index_embedder(recipe)
            # the shipped skills' vectors come with the package: none of them is embedded again
            return SeededEmbedder(lambda: self.index_embedder(recipe), recipe)

        return build_index(
            self.root, self.home, embedder, self.chroma_url, progress, gc=gc, dense_model=recipe
        )

    def stale(self, env: Any = None) -> StaleReport:
        """Skills that are not verified right now, worst first, with the validators' reasons."""
        from kbase.schema import StaleReport

        statuses = self.statuses(env)
        rows = sorted(
            (a for a in statuses.values() if a.status != "verified"),
            key=lambda a: (severity(a.status), a.skill),
        )
        counts: Counter[str] = Counter(a.status for a in statuses.values())
        return StaleReport(total=len(statuses), counts=counts, skills=rows, env=env)

    # ------------------------------------------------------------------ get / list
    def list_entries(self, kind: str | None = None) -> list[EntrySummary]:
        """Every entry (indexed, or parsed now when there is no index), with its status."""
        from kbase.schema import EntrySummary

        if kind is not None and kind not in KINDS:
            raise InvalidArgument(f"kind must be one of {', '.join(KINDS)}, got {kind!r}", "kind")
        entries = [e for e in self._entries() if kind is None or e.kind == kind]
        statuses = self.statuses() if any(e.kind == "skill" for e in entries) else {}
        out = []
        for e in entries:
            st, _, _ = self._status_of(e, statuses)
            out.append(EntrySummary(**attrs(e, "id kind title path tags repo pr date"), status=st))
        return out

    def get(self, entry_id: str, section: str | None = None, env: Any = None) -> EntryDoc:
        """One entry in full, or one section of it (status judged for `env`, as in search)."""
        from kbase.ingest.files import read_text
        from kbase.ingest.markdown import parse_body, split_front_matter
        from kbase.schema import EntryDoc, SectionText

        idx = self.searcher().index() if self.is_indexed() else None
        if idx is not None and entry_id in idx.by_id:
            entry = idx.entries[idx.by_id[entry_id]]
            idx.fill_texts([entry])
        else:
            entry = self._find_unindexed(entry_id)
        if entry is None:
            ids = [e.id for e in self._entries()]
            raise NotFound(f"no entry with id {entry_id!r}" + did_you_mean(entry_id, ids, "ids"))
        try:
            text = read_text(self.root / entry.path, self.root)
            _, body, body_line = split_front_matter(text, entry.path)
        except (OSError, ProblemsError) as exc:  # indexed, but the file went away or broke since
            raise NotFound(
                f"entry {entry_id!r} is indexed but its file cannot be read now ({exc}); re-index"
            ) from None
        sections, _, _ = parse_body(body, body_line)
        secs = [SectionText(title=s.title or "intro", line=s.line, text=s.text) for s in sections]
        for ch in entry.chunks:
            if ch.section in ("trigger", "steps", "failure_modes"):
                secs.append(SectionText(title=ch.section, line=ch.line, text=ch.text))
        st, on, at = self._status_of(entry, self.statuses(env) if entry.kind == "skill" else {})
        if section is not None:
            want = section.strip().lower()
            secs = [s for s in secs if s.title.lower() == want]
            if not secs:
                titles = [s.title for s in sections] + [
                    c.section for c in entry.chunks if c.section in ("trigger", "steps")
                ]
                raise NotFound(
                    f"entry {entry_id!r} has no section {section!r}"
                    + did_you_mean(section, titles, "sections")
                )
            text = "\n\n".join(s.text for s in secs)
        return EntryDoc(
            **attrs(entry, "id kind title path repo pr tags"),
            status=st,
            verified_on=on,
            verified_at=at,
            sections=secs,
            text=text,
            claims=self._claims_by_id([entry]).get(entry.id, []),
            feedback=self._feedback_of(entry.id),
        )

    def _find_unindexed(self, entry_id: str) -> Any:
        from kbase.retrieval.collect import collect_entries

        if entry_id.startswith("pr:"):
            entries, _, _ = collect_entries(self.root)
            return next((e for e in entries if e.id == entry_id), None)
        from kbase.ingest.skills import SKILL_FILE, load_skill, skill_entry
        from kbase.schema import NAME_RE

        if not NAME_RE.match(entry_id):
            return None
        f = self.root / "skills" / entry_id / SKILL_FILE
        if not f.exists():
            f = self.root / "skills" / "_drafts" / entry_id / SKILL_FILE
        if not f.exists():
            return None
        try:
            return skill_entry(load_skill(f, self.root))
        except ProblemsError:
            return None

    # ------------------------------------------------------------------ health
    def health(self, read_index: bool = True) -> Health:
        """`read_index=False`: an index being built may be half written; report none."""
        from kbase.retrieval.generations import current_id, current_meta
        from kbase.schema import Health

        gen = current_id(self.home) if read_index else None
        idx = self.searcher().index() if gen is not None else None
        meta = (current_meta(self.home) or {}) if gen is not None else {}
        return Health(
            ok=gen is not None,
            generation=gen,
            entries=len(idx.entries) if idx is not None else 0,
            chroma="server" if self.chroma_url else "embedded",
            degraded=int(meta.get("problem_count", 0)),
            problems=list(meta.get("problems", [])),
        )

    list = list_entries  # `kb.list()`: the name the docs use
