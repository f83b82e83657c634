"""`kbase mine`: turn a clone's history (its main line and what merges bring in) into PR cards.

Order of writes is what makes an interrupted mine safe: cards atomically, `.state.json` last
(docs/pr-archive.md "Incremental runs").
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kbase.ingest.mine_state import (
    NOOP_REASON,
    STATE_FILE,
    STATE_VERSION,
    GitFailed,
    GitRepo,
    MineReport,
    MiningError,
    archive_dir,
    atomic_write,
    open_repo,
    origin_url,
    read_state,
    sweep_temporary,
)

if TYPE_CHECKING:
    from kbase.ingest.gitlog import CommitFacts

    from kbase.schema import Recipe

__all__ = ["MineReport", "MiningError", "archive_dir", "mine", "open_repo", "read_state"]

# a no-op mine (the common case: nothing new) reads the state and HEAD and stops; what mining
# needs (the card writer, the log parser, tree-sitter) is imported only when there is work;
# through the CLI, kbase.mine_cli decides a no-op before this module is imported
FLUSH_EVERY = int(os.environ.get("KBASE_MINE_FLUSH_EVERY", "100"))


def _is_ancestor(repo: GitRepo, old: str, new: str) -> bool:
    return repo.ok("merge-base", "--is-ancestor", old, new)


def mine(
    source: str | os.PathLike,
    root: Path,
    recipe: Recipe,
    since: str | None = None,
    full: bool = False,
    progress: Callable[[int, int], None] | None = None,
    recipe_fingerprint: str | None = None,
) -> MineReport:
    """Mine `source` into <root>/pr_archive/<recipe.name>/ and return what happened.

    `recipe_fingerprint` (mine_state.recipe_fingerprint of the recipe's file) goes into the
    state, where the CLI's no-op check finds it; None (a recipe not read from a file) leaves
    that check to this function."""
    t0 = time.perf_counter()
    repo = open_repo(source)
    from_origin = recipe.upstream is None
    if from_origin:
        url = origin_url(str(repo.git_dir))
        if url:  # links on the cards without a recipe: the web page of `origin`
            recipe = recipe.model_copy(update={"upstream": url})
    head = repo.head
    folder = archive_dir(root, recipe.name)
    folder.mkdir(parents=True, exist_ok=True)
    sweep_temporary(folder)
    state = None if full else read_state(folder)
    report = MineReport(
        repo=recipe.name,
        source=str(Path(source).expanduser().resolve()),
        mode="full",
        head=head,
        range="HEAD",
    )

    _choose_mode(repo, report, state, since, full, recipe, str(source))

    if report.mode != "noop":
        _mine_walk(repo, root, folder, recipe, report, progress)

    _save_state(folder, state, report, recipe, head, recipe_fingerprint, from_origin)
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def _choose_mode(
    repo: GitRepo,
    report: MineReport,
    state: dict | None,
    since: str | None,
    full: bool,
    recipe: Recipe,
    source: str,
) -> None:
    """The report's mode, range and reason: since a revision, full (and why), no-op or
    incremental from the last mined commit."""
    head = report.head
    if since:
        try:
            base = repo.run("rev-parse", "--verify", "-q", f"{since}^{{commit}}").strip()
        except GitFailed:
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
        report.mode, report.range = "noop", f"{head}..{head}"
        report.reason = NOOP_REASON
    else:
        report.mode, report.range = "incremental", f"{state['last_sha']}..{head}"


def _mine_walk(
    repo: GitRepo,
    root: Path,
    folder: Path,
    recipe: Recipe,
    report: MineReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Stream the commits of the report's range that carry history and write their cards,
    flushing the cache every FLUSH_EVERY commits (a killed mine's re-run reads them back)."""
    from kbase.ingest.card_writer import CardWriter
    from kbase.ingest.graph import read_plan
    from kbase.ingest.logrun import stream_history
    from kbase.ingest.mine_cache import open_cache

    walk = read_plan(repo, report.range, report.head)
    total = len(walk.mine)
    cache = open_cache(root)
    writer = CardWriter(
        folder,
        recipe,
        incremental=report.mode in ("incremental", "since"),
        report=report,
        cache=cache,
    )
    done = 0

    def on_commit(c: CommitFacts) -> None:
        nonlocal done
        writer(c)
        done += 1
        if cache is not None and done % FLUSH_EVERY == 0:
            cache.flush()
        if progress:
            progress(done, total)

    try:
        stream_history(repo, walk.mine, on_commit, cache, report)
    finally:
        if cache is not None:
            cache.close()
    # commits that were not streamed still count: a PR's own branch commits, transport merges
    for sha in walk.order:
        if walk.role[sha] in ("spine", "side"):
            continue
        report.commits += 1
        if walk.nodes[sha].pr is None:
            report.without_pr += 1
    writer.finish()
    report.behind_merges = list(walk.role.values()).count("side")
    report.prs = sum(1 for c in writer.cards.values() if c.pr is not None)
    if report.mode == "full":
        _drop_vanished(folder, set(writer.cards), report)


def _save_state(
    folder: Path,
    state: dict | None,
    report: MineReport,
    recipe: Recipe,
    head: str,
    recipe_fingerprint: str | None,
    from_origin: bool,
) -> None:
    """Write .state.json, unless a no-op would write the same state again."""
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
        "recipe_source": (
            {"file": recipe_fingerprint, "origin": from_origin} if recipe_fingerprint else None
        ),
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


def _drop_vanished(folder: Path, kept: set[str], report: MineReport) -> None:
    """After a full mine, cards no longer in the history go, unless they hold Notes."""
    from kbase.ingest.card_format import existing_notes, notes_text

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
