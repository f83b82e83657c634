"""`kbase mine`: turn a clone's history (its main line and what merges bring in) into PR cards.

Order of writes is what makes an interrupted mine safe: every card is written
atomically (temporary file, then rename) and `.state.json` is written last, so a
killed run leaves whole cards and the previous state; the next run mines the same
range again and rewrites the same files.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kbase.ingest import classify
from kbase.ingest.bodies import BodyFacts
from kbase.ingest.card_build import (
    SHORT_SHA,
    body_facts,
    build_card,
    commit_ref,
    key_diff,
    merge_files,
    title_of,
    to_change,
)
from kbase.ingest.card_format import existing_notes, notes_text, render_card, split_card
from kbase.ingest.cards import ARCHIVE_DIR
from kbase.ingest.gitlog import CommitFacts
from kbase.ingest.graph import read_plan
from kbase.ingest.logrun import stream_history

from kbase.errors import KbaseError
from kbase.schema import PRCard, Recipe

STATE_FILE = ".state.json"
PROGRESS_FILE = ".progress.json"  # only while a mine runs: where a killed one resumes
CHECKPOINT_EVERY = int(os.environ.get("KBASE_MINE_CHECKPOINT_EVERY", "100"))
STATE_VERSION = 1
SAMPLE_LIMIT = 20
WARNING_LIMIT = 200


def card_stem(card: PRCard) -> str:
    """File name (without .md) of a card: the PR number, or commit-<short sha> for a direct push."""
    return str(card.pr) if card.pr is not None else f"commit-{commit_ref(card.sha)}"


class MiningError(KbaseError):
    """A problem with the repository or the archive that the user must fix; the message says how."""


@dataclass
class MineReport:
    repo: str
    source: str
    mode: str  # full | incremental | since | noop
    head: str
    range: str
    reason: str = ""
    commits: int = 0
    prs: int = 0
    without_pr: int = 0
    without_pr_sample: list[dict] = field(default_factory=list)
    behind_merges: int = 0  # commits brought in by merges that name no PR, mined like the main line
    direct_pushes: int = 0  # commits with no PR number that got a commit card
    warnings: list[str] = field(default_factory=list)  # missing blobs and the like
    resumed_after: int = 0  # commits an interrupted run had mined already (0: a fresh run)
    written: int = 0
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def archive_dir(root: Path, name: str) -> Path:
    return root / ARCHIVE_DIR / name


def read_state(folder: Path) -> dict | None:
    p = folder / STATE_FILE
    if not p.exists():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MiningError(
            f"{p}: unreadable state file ({exc}); delete it or run with --full"
        ) from None
    if not isinstance(data, dict) or "last_sha" not in data:
        raise MiningError(f"{p}: state file has no 'last_sha'; delete it or run with --full")
    return data


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, path)


def open_repo(source: str | os.PathLike):
    """The git repository at `source`, refusing paths that are not a usable clone."""
    import git

    p = Path(source).expanduser()
    if not p.exists():
        raise MiningError(f"{p}: no such directory")
    try:
        repo = git.Repo(p)
    except git.InvalidGitRepositoryError:
        raise MiningError(
            f"{p}: not a git repository (expected a local clone; run `git clone <url>` first)"
        ) from None
    except git.NoSuchPathError:
        raise MiningError(f"{p}: no such directory") from None
    # every git call names the repository directly: a bare mirror without a `config` file
    # (which gitpython takes for a work tree inside its parent) and worktrees then work alike
    repo.git.update_environment(GIT_DIR=str(Path(repo.git_dir).resolve()))
    if not repo.head.is_valid():
        raise MiningError(f"{p}: the repository has no commits on HEAD")
    if repo.git.rev_parse("--is-shallow-repository").strip() == "true":
        depth = len(repo.git.rev_list("--first-parent", "HEAD").split())
        raise MiningError(
            f"{p}: shallow clone (only {depth} first-parent commit(s) are present, "
            "older PRs are missing); "
            "run `git fetch --unshallow` in it, then mine again"
        )
    return repo


def _is_ancestor(repo, old: str, new: str) -> bool:
    import git

    try:
        repo.git.merge_base("--is-ancestor", old, new)
        return True
    except git.GitCommandError:
        return False


class _CardWriter:
    """Accumulates commits newest-first and writes one card per PR (or direct push) as soon as
    it is known; revert links in both directions are settled in `link_reverts` at the end."""

    def __init__(self, folder: Path, recipe: Recipe, incremental: bool, report: MineReport):
        self.folder = folder
        self.recipe = recipe
        self.matcher = recipe.matcher()
        self.incremental = incremental
        self.report = report
        self.cards: dict[str, PRCard] = {}  # card file stem -> card
        self.seen_shas: set[str] = set()

    def __call__(self, c: CommitFacts) -> None:
        self.report.commits += 1
        self.seen_shas.add(c.sha)
        for f in c.files:
            if f.problem and len(self.report.warnings) < WARNING_LIMIT:
                self.report.warnings.append(f"{c.sha[:12]}: {f.problem}; its symbols are skipped")
        found = classify.pr_number(c.subject)
        pr, style = found if found else (None, None)
        files = sorted((to_change(f) for f in c.files), key=lambda f: f.path)
        card = build_card(
            self.recipe,
            self.matcher,
            pr=pr,
            title=title_of(c, style),
            sha=c.sha,
            date=c.date,
            files=files,
            body=body_facts(c, pr, style),
            key=key_diff(c.files, files),
        )
        if pr is None:
            self.report.without_pr += 1
            self.report.direct_pushes += 1
            if len(self.report.without_pr_sample) < SAMPLE_LIMIT:
                self.report.without_pr_sample.append(
                    {"sha": c.sha, "date": c.date, "subject": c.subject}
                )
        stem = card_stem(card)
        held = self.cards.get(stem)
        if held is not None and (c.sha == held.sha or c.sha in held.also):
            return  # the card read from disk already holds this commit
        if held is not None:
            # the same PR number on an older commit (a re-land, an empty follow-up): one card
            card = _combine(self, held, card)
        self._write(stem, card)

    def _write(self, stem: str, card: PRCard) -> None:
        path = self.folder / f"{stem}.md"
        old_text = path.read_text(encoding="utf-8") if path.exists() else ""
        if old_text and self.incremental and stem not in self.cards:
            card = self._merge_with_existing(card, old_text)
        self.cards[stem] = card
        self._put(path, card, old_text)

    def _put(self, path: Path, card: PRCard, old_text: str) -> None:
        text = render_card(card, existing_notes(old_text), card.also)
        if text == old_text:
            self.report.unchanged += 1
            return
        atomic_write(path, text)
        self.report.written += 1

    def _merge_with_existing(self, card: PRCard, old_text: str) -> PRCard:
        """An incremental run met a card that exists already: facts on disk are never dropped."""
        try:
            old = PRCard.model_validate(split_card(old_text).meta)
        except Exception:
            return card
        if card.sha == old.sha or card.sha in old.also:
            # this commit is already in the card (a re-run over a mined range, a resumed mine)
            return old.model_copy(update={"reverted_by": old.reverted_by})
        if old.sha in self.seen_shas:
            return card
        return _combine(self, card, old)

    def link_reverts(self) -> None:
        """Give every reverted card its `reverted_by`, from the reverts this run wrote. A target
        mined in an earlier run is read from disk and rewritten."""
        by_sha: dict[str, str] = {}
        for stem, card in self.cards.items():
            for sha in (card.sha, *card.also):
                by_sha[sha[:SHORT_SHA]] = stem
        wanted: dict[str, set[str]] = {}
        for stem, card in self.cards.items():
            ref = f"#{card.pr}" if card.pr is not None else commit_ref(card.sha)
            target = None
            if card.reverts is not None:
                target = str(card.reverts)
            elif card.reverts_commit:
                target = by_sha.get(card.reverts_commit[:SHORT_SHA]) or _find_by_sha(
                    self.folder, card.reverts_commit
                )
            if target is not None and target != stem:
                wanted.setdefault(target, set()).add(ref)
        for stem, refs in sorted(wanted.items()):
            held = self.cards.get(stem)
            path = self.folder / f"{stem}.md"
            old_text = path.read_text(encoding="utf-8") if path.exists() else ""
            if held is None:
                if not old_text:
                    continue
                try:
                    held = PRCard.model_validate(split_card(old_text).meta)
                except Exception:
                    continue
            card = held
            merged = sorted(set(card.reverted_by) | refs, key=_ref_order)
            if merged != card.reverted_by:
                card = card.model_copy(update={"reverted_by": merged})
                self.cards[stem] = card
                self._put(path, card, old_text)


def _ref_order(ref: str) -> tuple[int, int, str]:
    return (0, int(ref[1:]), "") if ref.startswith("#") else (1, 0, ref)


def _find_by_sha(folder: Path, sha: str) -> str | None:
    """The card (file stem) of an earlier run whose commit is `sha` (a prefix is enough)."""
    short = sha[:SHORT_SHA]
    p = folder / f"commit-{short}.md"
    if p.exists():
        return p.stem
    for p in folder.glob("*.md"):
        try:
            head = p.read_text(encoding="utf-8")[:4000]
        except OSError:
            continue
        if f"\nsha: {short}" in head or f"\nsha: {sha}" in head:
            return p.stem
    return None


def _combine(w: _CardWriter, newer: PRCard, older: PRCard) -> PRCard:
    files = merge_files(newer.files, older.files)
    also = list(dict.fromkeys([*newer.also, older.sha, *older.also]))
    also = [s for s in also if s != newer.sha]
    body = BodyFacts(
        description=newer.description or older.description or "",
        co_authors=list(dict.fromkeys(newer.co_authors + older.co_authors)),
        issues=list(dict.fromkeys(newer.issues + older.issues)),
        reverts_pr=newer.reverts if newer.reverts is not None else older.reverts,
        reverts_commit=newer.reverts_commit or older.reverts_commit,
        numbers=list(dict.fromkeys(newer.numbers + older.numbers)),
    )
    card = build_card(
        w.recipe,
        w.matcher,
        pr=newer.pr,
        title=newer.title,
        sha=newer.sha,
        date=newer.date,
        files=files,
        body=body,
        key=newer.key_diff or older.key_diff,
        also=also,
    )
    return card.model_copy(
        update={
            "reverted_by": sorted(set(newer.reverted_by) | set(older.reverted_by), key=_ref_order)
        }
    )


def _sweep_temporary(folder: Path) -> None:
    for p in folder.glob(".*.tmp.*"):
        try:
            p.unlink()
        except OSError:
            pass


def mine(
    source: str | os.PathLike,
    root: Path,
    recipe: Recipe,
    since: str | None = None,
    full: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> MineReport:
    """Mine `source` into <root>/pr_archive/<recipe.name>/ and return what happened."""
    t0 = time.perf_counter()
    repo = open_repo(source)
    if recipe.upstream is None:
        from kbase.ingest.recipe_tools import origin_url

        url = origin_url(str(repo.git_dir))
        if url:  # links on the cards without a recipe: the web page of `origin`
            recipe = recipe.model_copy(update={"upstream": url})
    head = repo.head.commit.hexsha
    folder = archive_dir(root, recipe.name)
    folder.mkdir(parents=True, exist_ok=True)
    _sweep_temporary(folder)
    state = None if full else read_state(folder)
    report = MineReport(
        repo=recipe.name,
        source=str(Path(source).expanduser().resolve()),
        mode="full",
        head=head,
        range="HEAD",
    )

    if since:
        try:
            base = repo.git.rev_parse("--verify", f"{since}^{{commit}}").strip()
        except Exception:
            raise MiningError(f"--since {since!r}: no such revision in {source}") from None
        report.mode, report.range = "since", f"{base}..{head}"
    elif full:
        report.reason = "--full"
    elif state is None:
        report.reason = "no previous state"
    elif state.get("recipe_digest") != recipe.digest():
        report.reason = "the recipe changed since the last mine"
    elif not _is_ancestor(repo, state["last_sha"], head):
        report.reason = (
            f"history was rewritten: last mined commit {state['last_sha'][:12]} "
            "is not an ancestor of HEAD"
        )
    elif state["last_sha"] == head:
        report.mode, report.range, report.reason = (
            "noop",
            f"{head}..{head}",
            "nothing new since the last mine",
        )
    else:
        report.mode, report.range = "incremental", f"{state['last_sha']}..{head}"

    key = {
        "version": STATE_VERSION,
        "head": head,
        "range": report.range,
        "mode": report.mode,
        "recipe_digest": recipe.digest(),
    }
    if report.mode != "noop":
        walk = read_plan(repo, report.range, head)
        total = len(walk.mine)
        writer = _CardWriter(
            folder, recipe, incremental=report.mode in ("incremental", "since"), report=report
        )
        skip = _resume(folder, key, writer, walk.mine)
        done = skip

        def on_commit(c: CommitFacts) -> None:
            nonlocal done
            writer(c)
            done += 1
            if done % CHECKPOINT_EVERY == 0 and done < total:
                _checkpoint(folder, key, done, writer)
            if progress:
                progress(done, total)

        stream_history(repo, walk.mine[skip:], on_commit)
        # commits that were not streamed still count: a PR's own branch commits, transport merges
        for sha in walk.order:
            if walk.role[sha] in ("spine", "side"):
                continue
            report.commits += 1
            if walk.nodes[sha].pr is None:
                report.without_pr += 1
        writer.link_reverts()
        report.behind_merges = walk.count("side")
        report.prs = sum(1 for c in writer.cards.values() if c.pr is not None)
        if report.mode == "full":
            _drop_vanished(folder, set(writer.cards), report)

    prev = state or {}
    new_state = {
        "version": STATE_VERSION,
        "repo": recipe.name,
        "source": report.source,
        "last_sha": head,
        "mined_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "recipe_digest": recipe.digest(),
        "upstream": recipe.upstream,
        "families": recipe.families,
        "commits_mined": (0 if report.mode == "full" else prev.get("commits_mined", 0))
        + report.commits,
        "without_pr": (0 if report.mode == "full" else prev.get("without_pr", 0))
        + report.without_pr,
    }
    if (
        report.mode != "noop"
        or not state
        or {k: v for k, v in state.items() if k != "mined_at"}
        != {k: v for k, v in new_state.items() if k != "mined_at"}
    ):
        atomic_write(
            folder / STATE_FILE, json.dumps(new_state, indent=2, ensure_ascii=False) + "\n"
        )
    (folder / PROGRESS_FILE).unlink(missing_ok=True)
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


_COUNTERS = ("commits", "without_pr", "direct_pushes", "written", "unchanged")


def _checkpoint(folder: Path, key: dict, done: int, writer: _CardWriter) -> None:
    """Every card of the first `done` streamed commits is on disk: say so, so that a killed
    mine resumes after them instead of starting over."""
    r = writer.report
    data = {
        "key": key,
        "done": done,
        "stems": list(writer.cards),
        "counters": {k: getattr(r, k) for k in _COUNTERS},
        "without_pr_sample": r.without_pr_sample,
        "warnings": r.warnings,
    }
    atomic_write(folder / PROGRESS_FILE, json.dumps(data, ensure_ascii=False) + "\n")


def _resume(folder: Path, key: dict, writer: _CardWriter, order: list[str]) -> int:
    """Commits of `order` already mined by an interrupted run with the same key (0: none).
    The cards it wrote are read back, so merges and revert links come out as uninterrupted."""
    p = folder / PROGRESS_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
    except (OSError, ValueError):
        data = None
    if not data or data.get("key") != key or not 0 < data.get("done", 0) <= len(order):
        p.unlink(missing_ok=True)
        return 0
    cards: dict[str, PRCard] = {}
    for stem in data["stems"]:
        try:
            text = (folder / f"{stem}.md").read_text(encoding="utf-8")
            cards[stem] = PRCard.model_validate(split_card(text).meta)
        except Exception:  # a card gone or damaged since: start over, nothing is lost
            p.unlink(missing_ok=True)
            return 0
    writer.cards.update(cards)
    done = int(data["done"])
    writer.seen_shas.update(order[:done])
    for k, v in data["counters"].items():
        setattr(writer.report, k, v)
    writer.report.without_pr_sample = list(data.get("without_pr_sample", []))
    writer.report.warnings = list(data.get("warnings", []))
    writer.report.resumed_after = done
    return done


def _drop_vanished(folder: Path, kept: set[str], report: MineReport) -> None:
    """After a full mine, cards no longer in the history go, unless they hold Notes."""
    for p in folder.glob("*.md"):
        if not (p.stem.isdigit() or p.stem.startswith("commit-")) or p.stem in kept:
            continue
        try:
            notes = notes_text(existing_notes(p.read_text(encoding="utf-8")))
        except OSError:
            continue
        if notes:
            report.orphaned.append(p.stem)
        else:
            p.unlink()
            report.removed.append(p.stem)
    report.orphaned.sort(key=lambda s: (len(s), s))
    report.removed.sort(key=lambda s: (len(s), s))
