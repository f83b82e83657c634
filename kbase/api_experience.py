"""The experience loop of `KnowledgeBase` (a mixin of kbase.api): feedback and draft skills.

Both write into the knowledge base, so the servers expose them only when started with
`--allow-write`; the library and the CLI always can. Input is checked by kbase/feedback.py and
kbase/drafts.py; an id must name an existing entry (else NotFound with the nearest ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbase.errors import NotFound


class ExperienceAPI:
    if TYPE_CHECKING:  # provided by KnowledgeBase

        @property
        def root(self) -> Path: ...

    def _entries(self) -> list[Any]:  # provided by KnowledgeBase
        raise NotImplementedError

    def _feedback_of(self, entry_id: str) -> dict[str, Any] | None:
        from kbase.feedback import summaries

        s = summaries(self.root).get(entry_id)
        return s.as_dict() if s is not None else None

    def feedback(
        self, entry_id: str, verdict: str, note: str = "", source: str = "python"
    ) -> dict[str, Any]:
        """Append `helpful`, `harmful` or `outdated` (with a note) to the entry's feedback log."""
        from kbase.feedback import append, check_note, check_verdict
        from kbase.suggest import did_you_mean

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
        tags: dict[str, list[str]] | None = None,
        name: str | None = None,
        index: bool = True,
    ) -> dict[str, Any]:
        """Write skills/_drafts/<name>/SKILL.md (lint-clean, status draft); index it if we can."""
        from kbase.config import model_installed
        from kbase.drafts import propose

        ids = {e.id for e in self._entries()}
        draft = propose(
            self.root,
            title,
            symptom,
            cause,
            fix,
            snippet=snippet,
            tags=tags,
            name=name,
            known_ids=ids,
        )
        out: dict[str, Any] = {**draft.as_dict(), "indexed": False}
        if index and model_installed():
            rep = self.index()  # type: ignore[attr-defined]  # incremental: embeds only the draft
            out["indexed"] = draft.name in {e for e in rep.embedded_entries}
        if not out["indexed"]:
            out["note"] = "run `kbase index` to make the draft searchable"
        return out
