"""What a re-index takes over from the previous generation without redoing it (issue #11: an
incremental re-index after one edit must take under a second at ~6.5k entries).

The previous generation's entries are carried over undecoded (retrieval/carried.py): an
unchanged entry's stored lines are copied as they are, and texts are read only for the entries
that need them (to embed, or to tokenize when the BM25 token cache lacks them). An edited entry
keeps the vector of every chunk whose text did not change. A run that finds nothing changed
publishes no new generation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kbase.retrieval.carried import Carried, carried_entries, decode
from kbase.retrieval.entry_table import EntryTable
from kbase.retrieval.generations import FORMAT_VERSION, Generation, read_card_stats

from kbase.schema import Entry


class Previous:
    def __init__(self, gen: Generation | None):
        """`gen`: loaded lazy (its entries an EntryTable). Its entries are carried over undecoded
        (retrieval/carried.py) when it stores the carry columns, else decoded (light)."""
        self.gen = gen
        self.table = (
            gen.entries if gen is not None and isinstance(gen.entries, EntryTable) else None
        )
        carried = (
            carried_entries(self.table, gen.path, self._texts_line)
            if gen is not None and self.table is not None and self.table.has_lines()
            else None
        )
        self.carries = carried is not None
        self.entries: Sequence[Any] = (
            carried if carried is not None else list(gen.entries) if gen is not None else []
        )
        self._pos = {id(e): i for i, e in enumerate(self.entries)}
        self.by_id = {e.id: e for e in self.entries}
        self._lines: list[bytes] | None = None

    def _texts_line(self, i: int) -> bytes:
        if self._lines is None:
            assert self.gen is not None and self.gen.texts is not None
            self._lines = self.gen.texts.lines()
        return self._lines[i]

    def fill(self, entries: Iterable[Any]) -> None:
        """Chunk texts for those of these entries that come from the previous generation
        (a Carried entry reads its own when asked)."""
        texts = self.gen.texts if self.gen is not None else None
        if texts is not None:
            texts.fill(
                [
                    (self._pos[id(e)], e)
                    for e in entries
                    if id(e) in self._pos and not isinstance(e, Carried)
                ]
            )

    def decoded(self, entries: list[Any]) -> dict[int, Entry]:
        """id(carried entry) -> the whole entry with its texts, for the Carried among these
        (to embed them again); the decoded entry counts as taken over (owns, stored_line)."""
        out: dict[int, Entry] = {}
        for e in entries:
            if isinstance(e, Carried) and self.table is not None:
                out[id(e)] = full = decode(self.table, e)
                self._pos[id(full)] = e.i
        return out

    def stored_line(self, e: Any) -> bytes | None:
        """The entry's texts.jsonl line as stored, if it is a previous entry taken over."""
        i = self._pos.get(id(e))
        if i is None or self.gen is None or self.gen.texts is None:
            return None
        return self._texts_line(i)

    def owns(self, e: Any) -> bool:
        """True for an entry object taken over from the previous generation."""
        return id(e) in self._pos

    def kept_vectors(
        self,
        todo: list[Any],
        prev_vectors: Any,
        dense_chunks: Callable[[Any], list[Any]],
        partition_key: Callable[[str, str | None], str],
    ) -> dict[str, Any]:
        """New chunk id -> the previous vector of a chunk of the same entry with the same title
        and text (the embedding of an edited entry's unchanged chunks is the same), or of the
        same chunk id: an id names text, model and recipe, so a vector the files hold for it is
        the one the store lacks (a store moved to another layout: retrieval/vectors.py).
        """
        out: dict[str, Any] = {}
        if prev_vectors is not None:
            wanted: dict[str, set[str]] = {}
            for e in todo:
                ids = wanted.setdefault(partition_key(e.kind, e.repo), set())
                ids.update(c.id for c in dense_chunks(e))
            for key, ids in wanted.items():
                out.update(prev_vectors.vectors_of(key, ids))
        pairs = []
        for e in todo:
            old = self.by_id.get(e.id)
            if (
                old is None
                or self.owns(e)
                or (old.kind, old.title, old.repo) != (e.kind, e.title, e.repo)
            ):
                continue
            pairs.append((e, old))
        if not pairs or prev_vectors is None:
            return out
        self.fill(old for _, old in pairs)
        for e, old in pairs:
            have = {c.text: c.id for c in dense_chunks(old) if c.text}
            want = {c.id: have[c.text] for c in dense_chunks(e) if c.text in have}
            got = prev_vectors.vectors_of(partition_key(e.kind, e.repo), set(want.values()))
            out.update({new: got[old_id] for new, old_id in want.items() if old_id in got})
        return out

    def unchanged(
        self,
        entries: list[Any],
        card_stats: dict[str, list[int]],
        meta: dict,
        by_part: dict[str, list[str]],
        prev_vectors: Any,
        tokenizer: str,
    ) -> bool:
        """True when a new generation would equal this one: same entries (id, path, content
        hash) in the same order, card signatures, meta, vector files and BM25 files."""
        gen = self.gen
        if gen is None or prev_vectors is None or len(entries) != len(self.entries):
            return False
        if any(
            (a.id, a.path, a.content_hash) != (b.id, b.path, b.content_hash)
            for a, b in zip(entries, self.entries, strict=True)
        ):
            return False
        if any(gen.meta.get(k) != v for k, v in meta.items()):
            return False
        if gen.meta.get("format") != FORMAT_VERSION or not self.carries:
            return False  # an older layout is written anew (vectors taken over, none embedded)
        if read_card_stats(gen) != card_stats:
            return False
        from kbase.retrieval import lexical as L

        bm25 = gen.path / "bm25"
        try:
            if (bm25 / L.TOKENIZER_FILE).read_text(encoding="utf-8").strip() != tokenizer:
                return False
        except OSError:
            return False
        if not (bm25 / L.TITLE_TOKENS_FILE).exists():
            return False
        if set(prev_vectors.parts) != set(by_part):
            return False
        return all(prev_vectors.ids(k) == ids for k, ids in by_part.items())
