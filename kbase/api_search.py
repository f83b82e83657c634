"""The search path of `KnowledgeBase` (a mixin of kbase.api), and the experience loop that feeds
it (`.feedback()`, `.propose()`: the servers expose those only with `--allow-write`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kbase.closed_sets import DRAFT_STATUS, PR_STATUS, STATUS_SPECS
from kbase.errors import InvalidArgument, NotFound, Unavailable, did_you_mean

if TYPE_CHECKING:  # each method imports the models it makes: a search defines no others
    from kbase.schema import Hit, SearchQuery, SearchResult, SkillAudit


def attrs(obj: Any, names: str) -> dict[str, Any]:
    """The attributes `names` (space-separated) of obj, by name: the fields a model copies."""
    return {n: getattr(obj, n) for n in names.split()}


DRAFTS = "skills/_drafts/"
# Entries in the compact candidate list (issue #25: the caller picks from it). 13, not 10: on the
# real-problem tune half the list held a fixing skill for 0.949 of covered problems at 10 and 0.978
# at 13 (12: 0.949); MCP's default budget still fits 13 by cutting their lines to 100 characters.
CANDIDATES = 13


def no_good_match(cands: list[Any]) -> bool:
    """True when the best candidate's confidence is under the fitted threshold (or nothing came
    back at all): the knowledge base most likely has nothing for this question."""
    from kbase.retrieval.fusion import confidence_model

    model = confidence_model()
    best = max((c.confidence for c in cands if c.confidence is not None), default=None)
    if best is None:
        return not cands
    return model is not None and best < model[2]


class _Ranked(NamedTuple):
    """A candidate as a search ranks it before the hits it keeps are built."""

    id: str
    score: float  # rounded as the hit shows it (feedback's nudge multiplies this one)
    status: str
    verified_on: Any
    verified_at: Any
    cand: Any  # retrieval.searcher.Candidate


class SearchAPI:
    if TYPE_CHECKING:  # provided by KnowledgeBase
        root: Path
        home: Path

        def searcher(self) -> Any: ...
        def is_indexed(self) -> bool: ...
        def index(self, progress: Any = None, gc: bool = True) -> Any: ...

    def statuses(self, env: Any = None) -> dict[str, SkillAudit]:
        """skill name -> SkillAudit (cached by the validators until an input changes)."""
        from kbase.validators.status import skill_statuses

        try:
            return skill_statuses(self.root, env=env)
        except FileNotFoundError:
            return {}

    def _status_of(self, entry: Any, statuses: dict[str, SkillAudit]) -> tuple[str, Any, Any]:
        if entry.kind == "pr":
            return PR_STATUS, None, None
        if entry.path.startswith(DRAFTS):
            return DRAFT_STATUS, None, None
        audit = statuses.get(entry.id)
        if audit is None:
            return "unverified", None, None
        return audit.status, audit.verified_on, audit.last_pass

    def _entries(self) -> list[Any]:
        idx = self.searcher().index() if self.is_indexed() else None
        if idx is not None:
            return list(idx.entries)
        from kbase.retrieval.collect import collect_entries

        return collect_entries(self.root)[0]

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
        env: Any = None,
    ) -> list[Hit]:
        """The hits for one query; arguments as in kbase.schema.SearchQuery (InvalidArgument)."""
        from kbase.schema import SearchQuery

        raw = {n: v for n, v in locals().items() if n in SearchQuery.model_fields}
        if isinstance(status, str):
            raw["status"] = [status]
        return self.query(SearchQuery.parse(**raw), auto_index=auto_index).hits

    def source_count(self) -> int:
        """How many files a build reads (skills, drafts, PR cards), without parsing them."""
        from kbase.drafts import find_draft_files
        from kbase.ingest.cards import card_paths
        from kbase.ingest.skills import find_skill_files

        return sum(len(f(self.root)) for f in (find_skill_files, find_draft_files, card_paths))

    def skills_changed(self) -> bool:
        """Whether a skill or draft was added, edited or removed since the index was built: the
        files' (size, mtime, inode) against those the build recorded, without parsing them
        (a few ms for the shipped skills). PR cards are left to `kbase mine`/`kbase index`."""
        import glob
        import json
        import os

        from kbase.retrieval import generations as G
        from kbase.retrieval.collect import _file_sig

        gid = G.current_id(self.home)
        if gid is None:
            return False
        try:
            seen = json.loads((G.gens_dir(self.home) / gid / G.CARD_STATS).read_bytes())
        except (OSError, ValueError):
            return False  # an index from before the stats were kept: left as it is
        # what collect_entries reads (ingest.skills.find_skill_files, drafts.find_draft_files),
        # listed here without importing the parsers: a cold search must not load them
        shown = {
            rel: f
            for pat in ("skills/*/SKILL.md", "skills/_drafts/*/SKILL.md")
            for rel in glob.glob(pat, root_dir=self.root, include_hidden=True)
            if os.path.isfile(f := str(self.root / rel))
        }
        if any(seen.get(path) != _file_sig(f) for path, f in shown.items()):
            return True
        return any(p.startswith("skills/") and p not in shown for p in seen)

    def query(self, q: SearchQuery, auto_index: bool = True) -> SearchResult:
        if not self.is_indexed():
            if not auto_index:
                raise Unavailable(f"no index under {self.home}; run `kbase index`")
            self.index()
        return self._answer(q)

    def _answer(self, q: SearchQuery) -> SearchResult:
        from kbase.retrieval.fusion import use_when
        from kbase.retrieval.searcher import Future, make_snippet
        from kbase.schema import Hit, SearchCandidate, SearchResult

        wanted = set(q.status)
        self._check_archive_names(q)
        # The skills' statuses do not depend on the query: judged (or found cached: a stat of
        # every SKILL.md) on a thread of their own while the search embeds the query.
        aside = Future(self.statuses, q.env) if q.kind != "pr" else None
        cands = self.searcher().search(
            q.query,
            **q.model_dump(include={"k", "kind", "repo", "tags", "mode", "since", "until"}),
            fill_texts=False,  # texts and snippets below, for the hits returned only
        )
        skills = any(c.kind == "skill" for c in cands)
        statuses = aside.result() if aside is not None and skills else {}
        # Ranked on (id, score, status) first; only the k kept are decoded and made into hits
        # (a PR card's status needs no decoding; issue #11).
        ranked: list[_Ranked] = []
        for c in cands:
            pr = c.kind == "pr"
            st, on, at = (PR_STATUS, None, None) if pr else self._status_of(c.entry, statuses)
            if wanted and st not in wanted:
                continue
            ranked.append(_Ranked(c.id, round(c.score, 6), st, on, at, c))
        from kbase.feedback import rerank

        ranked = rerank(ranked, self.root)  # a mild nudge from users' feedback, near-ties only
        if not wanted:
            # Failing entries stay findable but rank below healthy ones.
            ranked.sort(key=lambda h: h.status in STATUS_SPECS and STATUS_SPECS[h.status].demoted)
        listed = ranked[:CANDIDATES]
        ranked = ranked[: q.k]
        # texts for the hits only: a candidate line needs none (a skill's evidence was read while
        # ranking, a PR card's line is its title)
        self.searcher().fill_texts([r.cand for r in ranked])
        claims = self._claims_by_id([r.cand.entry for r in ranked])  # claim views read the ledger
        hits: list[Hit] = []
        for r in ranked:
            e = r.cand.entry
            chunk = e.chunks[r.cand.chunk_index] if e.chunks else None
            hits.append(
                Hit(
                    **attrs(e, "id kind title path repo pr"),
                    **attrs(r, "score status verified_on verified_at"),
                    line=chunk.line if chunk else e.line,
                    section=chunk.section if chunk else "",
                    snippet=make_snippet(chunk.text, q.query) if chunk else "",
                    claims=claims.get(e.id, []),
                    confidence=r.cand.confidence,
                )
            )
        return SearchResult(
            query=q.query,
            hits=hits,
            no_good_match=no_good_match([r.cand for r in listed]),
            candidates=[
                SearchCandidate(
                    **attrs(r.cand, "id kind confidence"),
                    status=r.status,
                    use_when=use_when(r.cand),
                    trigger=r.cand.matched or None,
                )
                for r in listed
            ],
        )

    def _claims_by_id(self, entries: list[Any]) -> dict[str, list[Any]]:
        """The claims, with the values measured per environment, of these entries' skills (not
        drafts), read in one pass: the ledger's and the keys' state is looked at once."""
        names = [e.id for e in entries if e.kind == "skill" and not e.path.startswith(DRAFTS)]
        if not names:
            return {}
        from kbase.validators.claim_views import claim_views_of

        return claim_views_of(self.root, names)

    def archive_tags(self) -> frozenset[str]:
        """Every `key=value` tag of the archive's open keys (family, category, repo) that an
        entry has: what a PR-card filter may name."""
        from kbase.search_query import ARCHIVE_TAG_KEYS

        idx = self.searcher().index() if self.is_indexed() else None
        if idx is not None:
            return idx.tags_with_keys(tuple(ARCHIVE_TAG_KEYS))  # cached per generation
        tags = (t for e in self._entries() for t in e.tags)
        return frozenset(t for t in tags if t.split("=", 1)[0] in ARCHIVE_TAG_KEYS)

    def _check_archive_names(self, q: SearchQuery) -> None:
        """An archive repo or family/category tag that nothing in the index has is a typo."""
        from kbase.search_query import ARCHIVE_TAG_KEYS

        asked = [t for t in q.tags if t.split("=", 1)[0] in ARCHIVE_TAG_KEYS]
        if not q.repo and not asked:
            return
        known = self.archive_tags()
        if q.repo and f"repo={q.repo}" not in known:
            repos = [t[5:] for t in known if t.startswith("repo=")]
            raise InvalidArgument(
                f"no archive repo {q.repo!r} in the index" + did_you_mean(q.repo, repos, "repos"),
                "repo",
            )
        for t in asked:
            if t not in known:
                key, value = t.split("=", 1)
                vals = [x.split("=", 1)[1] for x in known if x.startswith(key + "=")]
                raise InvalidArgument(
                    f"no PR card has {key} {value!r}" + did_you_mean(value, vals, f"{key} values"),
                    "tags",
                )

    def _feedback_of(self, entry_id: str) -> dict[str, Any] | None:
        from kbase.feedback import summaries

        s = summaries(self.root).get(entry_id)
        return s.as_dict() if s is not None else None

    def feedback(
        self, entry_id: str, verdict: str, note: str = "", source: str = "python"
    ) -> dict[str, Any]:
        """Append `helpful`, `harmful` or `outdated` (with a note) to the entry's feedback log."""
        from kbase.feedback import append, check_note, check_verdict

        check_verdict(verdict)  # refuse bad input before looking anything up
        check_note(note)
        ids = {e.id for e in self._entries()}
        if entry_id not in ids:
            raise NotFound(f"no entry with id {entry_id!r}" + did_you_mean(entry_id, ids, "ids"))
        rec = append(self.root, entry_id, verdict, note, source=source)
        return {"recorded": rec.as_dict(), "feedback": self._feedback_of(entry_id)}

    def propose(
        self,
        title: str,
        symptom: str,
        cause: str,
        fix: str,
        snippet: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Write skills/_drafts/<name>/SKILL.md (lint-clean, status draft); index it if we can."""
        from kbase.config import model_installed
        from kbase.drafts import propose

        ids = {e.id for e in self._entries()}
        draft = propose(self.root, title, symptom, cause, fix, snippet, name=name, known_ids=ids)
        out: dict[str, Any] = {**draft.as_dict(), "indexed": False}
        if model_installed():  # an incremental index: it embeds only the draft
            out["indexed"] = draft.name in self.index().embedded_entries
        if not out["indexed"]:
            out["note"] = "run `kbase index` to make the draft searchable"
        return out
