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
from kbase.ingest.card_format import existing_notes, notes_text, render_card, split_card
from kbase.ingest.cards import ARCHIVE_DIR
from kbase.ingest.gitlog import CommitFacts, FileFacts, stream_history
from kbase.ingest.graph import read_plan

from kbase.errors import KbaseError
from kbase.schema import FileChange, PRCard, Recipe

STATE_FILE = ".state.json"
STATE_VERSION = 1
SAMPLE_LIMIT = 20


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
    written: int = 0
    unchanged: int = 0
    removed: list[int] = field(default_factory=list)
    orphaned: list[int] = field(default_factory=list)
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


def _to_change(f: FileFacts) -> FileChange:
    return FileChange(
        path=f.path, old_path=f.old_path, added=f.added, deleted=f.deleted, symbols=f.symbols
    )


def _merge_files(into: list[FileChange], extra: list[FileChange]) -> list[FileChange]:
    by_path = {f.path: f for f in into}
    for f in extra:
        have = by_path.get(f.path)
        if have is None:
            by_path[f.path] = f
            continue
        added = None if have.added is None or f.added is None else have.added + f.added
        deleted = None if have.deleted is None or f.deleted is None else have.deleted + f.deleted
        syms = list(dict.fromkeys(have.symbols + f.symbols))
        by_path[f.path] = have.model_copy(
            update={
                "added": added,
                "deleted": deleted,
                "symbols": syms,
                "old_path": have.old_path or f.old_path,
            }
        )
    return sorted(by_path.values(), key=lambda x: x.path)


def build_card(
    recipe: Recipe, matcher, pr: int, title: str, sha: str, date: str, files: list[FileChange]
) -> PRCard:
    fams: set[str] = set()
    for f in files:
        fams.update(matcher.families_of(f.path))
        if f.old_path:
            fams.update(matcher.families_of(f.old_path))
    paths = [f.path for f in files]
    cats = classify.categories(title, paths)
    totals = {
        "files": len(files),
        "added": sum(f.added or 0 for f in files),
        "deleted": sum(f.deleted or 0 for f in files),
    }
    binary = sum(1 for f in files if f.added is None)
    if binary:
        totals["binary"] = binary
    return PRCard(
        repo=recipe.name,
        pr=pr,
        url=recipe.pr_url(pr),
        sha=sha,
        date=date,
        title=title,
        families=sorted(fams),
        files=files,
        totals=totals,
        categories=cats,
        reverts=classify.reverted_pr(title) if "revert" in cats else None,
        tags=classify.tags(title, paths),
    )


def _title_of(c: CommitFacts, style: str) -> str:
    """The PR title: a merge keeps it in the body; a squash subject's ' (#N)' is dropped."""
    if style == "merge":
        first = next((ln.strip() for ln in c.body.splitlines() if ln.strip()), "")
        if first:
            return first
        return c.subject
    return classify.PR_SUFFIX.sub("", c.subject).strip() or c.subject


class _CardWriter:
    """Accumulates commits newest-first and writes one card per PR as soon as it is known."""

    def __init__(self, folder: Path, recipe: Recipe, incremental: bool, report: MineReport):
        self.folder = folder
        self.recipe = recipe
        self.matcher = recipe.matcher()
        self.incremental = incremental
        self.report = report
        self.cards: dict[int, tuple[PRCard, list[str]]] = {}
        self.seen_shas: set[str] = set()

    def __call__(self, c: CommitFacts) -> None:
        self.report.commits += 1
        self.seen_shas.add(c.sha)
        found = classify.pr_number(c.subject)
        if found is None:
            self.report.without_pr += 1
            if len(self.report.without_pr_sample) < SAMPLE_LIMIT:
                self.report.without_pr_sample.append(
                    {"sha": c.sha, "date": c.date, "subject": c.subject}
                )
            return
        pr, style = found
        files = [_to_change(f) for f in c.files]
        held = self.cards.get(pr)
        if held is not None:
            # the same PR number on an older commit (a re-land, an empty follow-up): one card
            card, also = held
            files = _merge_files(card.files, files)
            card = build_card(self.recipe, self.matcher, pr, card.title, card.sha, card.date, files)
            self._write(card, also + [c.sha])
            return
        card = build_card(
            self.recipe,
            self.matcher,
            pr,
            _title_of(c, style),
            c.sha,
            c.date,
            sorted(files, key=lambda f: f.path),
        )
        self._write(card, [])

    def _write(self, card: PRCard, also: list[str]) -> None:
        path = self.folder / f"{card.pr}.md"
        old_text = path.read_text(encoding="utf-8") if path.exists() else ""
        notes = existing_notes(old_text)
        if old_text and self.incremental and card.pr not in self.cards:
            card, also = self._merge_with_existing(card, also, old_text)
        self.cards[card.pr] = (card, also)
        text = render_card(card, notes, also)
        if text == old_text:
            self.report.unchanged += 1
            return
        atomic_write(path, text)
        self.report.written += 1

    def _merge_with_existing(
        self, card: PRCard, also: list[str], old_text: str
    ) -> tuple[PRCard, list[str]]:
        """An incremental run met a PR number that already has a card from an older commit."""
        try:
            old = PRCard.model_validate(split_card(old_text).meta)
        except Exception:
            return card, also
        if old.sha == card.sha or old.sha in self.seen_shas:
            return card, also
        files = _merge_files(old.files, card.files)
        merged = build_card(
            self.recipe, self.matcher, card.pr, card.title, card.sha, card.date, files
        )
        return merged, also + [old.sha]


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

    if report.mode != "noop":
        walk = read_plan(repo, report.range, head)
        total = len(walk.mine)
        writer = _CardWriter(
            folder, recipe, incremental=report.mode in ("incremental", "since"), report=report
        )

        def on_commit(c: CommitFacts) -> None:
            writer(c)
            if progress:
                progress(report.commits, total)

        stream_history(repo, walk.mine, on_commit)
        # commits that were not streamed still count: a PR's own branch commits, transport merges
        for sha in walk.order:
            if walk.role[sha] in ("spine", "side"):
                continue
            report.commits += 1
            if walk.nodes[sha].pr is None:
                report.without_pr += 1
        report.behind_merges = walk.count("side")
        report.prs = len(writer.cards)
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
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def _drop_vanished(folder: Path, kept: set[int], report: MineReport) -> None:
    """After a full mine, cards of PRs no longer in the history go, unless they hold Notes."""
    for p in folder.glob("*.md"):
        if not p.stem.isdigit() or int(p.stem) in kept:
            continue
        try:
            notes = notes_text(existing_notes(p.read_text(encoding="utf-8")))
        except OSError:
            continue
        if notes:
            report.orphaned.append(int(p.stem))
        else:
            p.unlink()
            report.removed.append(int(p.stem))
    report.orphaned.sort()
    report.removed.sort()
