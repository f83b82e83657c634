"""Writes cards as commits stream in, newest first: one per PR (or direct push), merged when a PR
number comes back on an older commit or with what is on disk in incremental runs, and linked to
the commits they revert once the stream ends."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from kbase.ingest import card_build as cb
from kbase.ingest import classify
from kbase.ingest.card_format import existing_notes, render_card, split_card
from kbase.ingest.cards import card_stem
from kbase.ingest.gitlog import CommitFacts
from kbase.ingest.logrun import pack_commit
from kbase.ingest.mine_state import atomic_write

from kbase.schema import PRCard, Recipe

if TYPE_CHECKING:
    from kbase.ingest.mine_cache import MineCache
    from kbase.ingest.mining import MineReport

SAMPLE_LIMIT = 20
WARNING_LIMIT = 200


class CardWriter:
    """Accumulates commits newest-first into one card per PR (or direct push); `finish` links
    reverts in both directions and writes every card once."""

    def __init__(
        self,
        folder: Path,
        recipe: Recipe,
        incremental: bool,
        report: MineReport,
        cache: MineCache | None = None,
    ):
        self.folder = folder
        self.recipe = recipe
        self.matcher = recipe.matcher()
        self.incremental = incremental
        self.report = report
        self.cards: dict[str, PRCard] = {}  # card file stem -> card
        self.seen_shas: set[str] = set()
        self.cache = cache
        self._recipe_key = cb.recipe_key(recipe)

    def __call__(self, c: CommitFacts) -> None:
        rep = self.report
        rep.commits += 1
        self.seen_shas.add(c.sha)
        for f in c.files:
            if f.problem and len(rep.warnings) < WARNING_LIMIT:
                rep.warnings.append(f"{c.sha[:12]}: {f.problem}; its symbols are skipped")
        pr, style = classify.pr_number(c.subject) or (None, None)
        card = self._card(c, pr, style)
        if pr is None:
            rep.without_pr += 1
            rep.direct_pushes += 1
            if len(rep.without_pr_sample) < SAMPLE_LIMIT:
                rep.without_pr_sample.append({"sha": c.sha, "date": c.date, "subject": c.subject})
        stem = card_stem(card)
        held = self.cards.get(stem)
        if held is not None and (c.sha == held.sha or c.sha in held.also):
            return  # the card read from disk already holds this commit
        if held is not None:
            # the same PR number on an older commit (a re-land, an empty follow-up): one card
            card = _combine(self, held, card)
        elif self.incremental:
            old = _read_card(self.folder / f"{stem}.md")
            if old is not None:
                card = self._merge_with_existing(card, old)
        self.cards[stem] = card

    def _card(self, c: CommitFacts, pr: int | None, style: str | None) -> PRCard:
        """The card of one commit alone, from the cache when an earlier mine built it."""
        key = None
        # facts with a problem (a blob git could not read) may read otherwise next time
        if self.cache is not None and not any(f.problem for f in c.files):
            key = cb.card_key(pack_commit(c), self._recipe_key)
            got = self.cache.get(f"card:{key}")
            with suppress(ValueError):  # a cached card the schema no longer takes is rebuilt
                if got is not None:
                    card = PRCard.model_validate(got)
                    self.report.cards_cached += 1
                    return card
        files = sorted((cb.to_change(f) for f in c.files), key=lambda f: f.path)
        card = cb.build_card(
            self.recipe,
            self.matcher,
            pr=pr,
            title=cb.title_of(c, style),
            sha=c.sha,
            date=c.date,
            files=files,
            body=cb.body_facts(c, pr, style),
            key=cb.key_diff(c.files, files),
        )
        if key is not None and self.cache is not None:
            self.cache.put(f"card:{key}", card.model_dump(mode="json"))
        return card

    def _merge_with_existing(self, card: PRCard, old: PRCard) -> PRCard:
        """An incremental run met a card that exists already: facts on disk are never dropped."""
        if card.sha == old.sha or card.sha in old.also:
            return old  # this commit is already in the card (a re-run over a mined range)
        if old.sha in self.seen_shas:
            return card
        return _combine(self, card, old)

    def finish(self) -> None:
        """Give every reverted card its `reverted_by` (a target mined in an earlier run is read
        from disk), then write each card whose text changed."""
        wanted = self._revert_targets()
        for stem, refs in sorted(wanted.items()):
            card = self.cards.get(stem) or _read_card(self.folder / f"{stem}.md")
            if card is None:
                continue
            merged = sorted(set(card.reverted_by) | refs, key=_ref_order)
            if merged != card.reverted_by:
                self.cards[stem] = card.model_copy(update={"reverted_by": merged})
        for stem, card in self.cards.items():
            path = self.folder / f"{stem}.md"
            old_text = path.read_text(encoding="utf-8") if path.exists() else ""
            text = render_card(card, existing_notes(old_text), card.also)
            if text == old_text:
                self.report.unchanged += 1
            else:
                atomic_write(path, text)
                self.report.written += 1

    def _revert_targets(self) -> dict[str, set[str]]:
        """Card stem -> the refs of this run's cards that revert it, by PR number, else by
        commit (this run's cards first, then the folder's)."""
        by_sha: dict[str, str] = {}
        for stem, card in self.cards.items():
            for sha in (card.sha, *card.also):
                by_sha[sha[: cb.SHORT_SHA]] = stem
        wanted: dict[str, set[str]] = {}
        heads: list[tuple[str, str]] | None = None  # the folder's cards, read at most once
        for stem, card in self.cards.items():
            target = None
            if card.reverts is not None:
                target = str(card.reverts)
            elif card.reverts_commit:
                target = by_sha.get(card.reverts_commit[: cb.SHORT_SHA])
                if target is None:
                    if heads is None:
                        heads = _card_heads(self.folder)
                    target = _find_by_sha(self.folder, card.reverts_commit, heads)
            if target is not None and target != stem:
                wanted.setdefault(target, set()).add(_ref(card))
        return wanted


def _read_card(path: Path) -> PRCard | None:
    """The card an earlier run wrote at `path`; None when there is none or it does not load."""
    try:
        return PRCard.model_validate(split_card(path.read_text(encoding="utf-8")).meta)
    except (OSError, ValueError):
        return None


def _ref(card: PRCard) -> str:
    """How other cards name this one in reverts / reverted_by."""
    return f"#{card.pr}" if card.pr is not None else card.sha[: cb.SHORT_SHA]


def _ref_order(ref: str) -> tuple[int, int, str]:
    return (0, int(ref[1:]), "") if ref.startswith("#") else (1, 0, ref)


def _card_heads(folder: Path) -> list[tuple[str, str]]:
    """(file stem, the first 4000 characters) of every card in the folder, in glob order: a
    full mine of a history with many reverts looked each one up in every card."""
    out = []
    for p in folder.glob("*.md"):
        with suppress(OSError):
            out.append((p.stem, p.read_text(encoding="utf-8")[:4000]))
    return out


def _find_by_sha(folder: Path, sha: str, heads: list[tuple[str, str]]) -> str | None:
    """The card (file stem) of an earlier run whose commit is `sha` (a prefix is enough)."""
    short = sha[: cb.SHORT_SHA]
    p = folder / f"commit-{short}.md"
    if p.exists():
        return p.stem
    for stem, head in heads:
        if f"\nsha: {short}" in head or f"\nsha: {sha}" in head:
            return stem
    return None


def _combine(w: CardWriter, newer: PRCard, older: PRCard) -> PRCard:
    files = cb.merge_files(newer.files, older.files)
    also = [s for s in dict.fromkeys([*newer.also, older.sha, *older.also]) if s != newer.sha]
    body = cb.BodyFacts(
        description=newer.description or older.description or "",
        co_authors=list(dict.fromkeys(newer.co_authors + older.co_authors)),
        issues=list(dict.fromkeys(newer.issues + older.issues)),
        reverts_pr=newer.reverts if newer.reverts is not None else older.reverts,
        reverts_commit=newer.reverts_commit or older.reverts_commit,
        numbers=list(dict.fromkeys(newer.numbers + older.numbers)),
    )
    card = cb.build_card(
        w.recipe,
        w.matcher,
        **newer.model_dump(include={"pr", "title", "sha", "date"}),
        files=files,
        body=body,
        key=newer.key_diff or older.key_diff,
        also=also,
    )
    reverted_by = sorted(set(newer.reverted_by) | set(older.reverted_by), key=_ref_order)
    return card.model_copy(update={"reverted_by": reverted_by})
