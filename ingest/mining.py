"""`kbase mine`: turn a clone's history (its main line and what merges bring in) into PR cards.
Order of writes makes an interrupted mine safe: cards atomically, `.state.json` last
(docs/pr-archive.md "Incremental runs")."""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kbase.ingest import mine_state as ms
from kbase.ingest.mine_state import GitRepo, MineReport, MiningError, open_repo

if TYPE_CHECKING:
    from kbase.ingest.gitlog import CommitFacts

    from kbase.schema import Recipe

# a no-op mine (the common case: nothing new) reads the state and HEAD and stops; what mining
# needs (the card writer, the log parser, tree-sitter) is imported only when there is work;
# through the CLI, kbase.mine_cli decides a no-op before this module is imported
FLUSH_EVERY = int(os.environ.get("KBASE_MINE_FLUSH_EVERY", "100"))
Progress = Callable[[int, int], None] | None


def mine(
    source: str | os.PathLike,
    root: Path,
    recipe: Recipe,
    since: str | None = None,
    full: bool = False,
    progress: Progress = None,
    recipe_fingerprint: str | None = None,
) -> MineReport:
    """Mine `source` into <root>/pr_archive/<recipe.name>/ and return what happened.
    `recipe_fingerprint` (mine_state.recipe_fingerprint of the recipe's file) goes into the
    state for the CLI's no-op check; None (a recipe not from a file) leaves that check to this."""
    t0 = time.perf_counter()
    repo = open_repo(source)
    from_origin = recipe.upstream is None
    if from_origin and (url := ms.origin_url(str(repo.git_dir))):
        # links on the cards without a recipe: the web page of `origin`
        recipe = recipe.model_copy(update={"upstream": url})
    head = repo.head
    folder = ms.archive_dir(root, recipe.name)
    folder.mkdir(parents=True, exist_ok=True)
    ms.sweep_temporary(folder)
    state = None if full else ms.read_state(folder)
    report = MineReport(recipe.name, str(Path(source).expanduser().resolve()), "full", head, "HEAD")
    # the mode, range and reason: since a revision, full (and why), no-op or incremental
    if since:
        try:
            base = repo.run("rev-parse", "--verify", "-q", f"{since}^{{commit}}").strip()
        except ms.GitFailed:
            raise MiningError(f"--since {since!r}: no such revision in {source}") from None
        report.mode, report.range = "since", f"{base}..{head}"
    elif full:
        report.reason = "--full"
    elif state is None:
        report.reason = "no previous state"
    elif state.get("recipe_digest") != recipe.digest():
        report.reason = "the recipe changed since the last mine"
    elif not repo.ok("merge-base", "--is-ancestor", state["last_sha"], head):
        report.reason = (
            f"history was rewritten: last mined commit {state['last_sha'][:12]} "
            "is not an ancestor of HEAD"
        )
    elif state["last_sha"] == head:
        report.mode, report.range = "noop", f"{head}..{head}"
        report.reason = ms.NOOP_REASON
    else:
        report.mode, report.range = "incremental", f"{state['last_sha']}..{head}"

    if report.mode != "noop":
        _mine_walk(repo, root, folder, recipe, report, progress)
    source_of = {"file": recipe_fingerprint, "origin": from_origin} if recipe_fingerprint else None
    _save_state(folder, state, report, recipe, source_of)
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def _mine_walk(
    repo: GitRepo, root: Path, folder: Path, recipe: Recipe, report: MineReport, progress: Progress
) -> None:
    """Stream the commits of the report's range that carry history and write their cards,
    flushing the cache every FLUSH_EVERY commits (a killed mine's re-run reads them back)."""
    from kbase.ingest.card_writer import CardWriter
    from kbase.ingest.graph import read_plan
    from kbase.ingest.logrun import stream_history
    from kbase.ingest.mine_cache import open_cache

    walk = read_plan(repo, report.range, report.head)
    cache = open_cache(root)
    incremental = report.mode in ("incremental", "since")
    writer = CardWriter(folder, recipe, incremental=incremental, report=report, cache=cache)
    done = 0

    def on_commit(c: CommitFacts) -> None:
        nonlocal done
        writer(c)
        done += 1
        if cache is not None and done % FLUSH_EVERY == 0:
            cache.flush()
        if progress:
            progress(done, len(walk.mine))

    try:
        stream_history(repo, walk.mine, on_commit, cache, report)
    finally:
        if cache is not None:
            cache.close()
    # commits that were not streamed still count: a PR's own branch commits, transport merges
    rest = [sha for sha in walk.order if walk.role[sha] not in ("spine", "side")]
    report.commits += len(rest)
    report.without_pr += sum(walk.nodes[sha].pr is None for sha in rest)
    writer.finish()
    report.behind_merges = list(walk.role.values()).count("side")
    report.prs = sum(1 for c in writer.cards.values() if c.pr is not None)
    if report.mode == "full":
        _drop_vanished(folder, set(writer.cards), report)


def _save_state(
    folder: Path, state: dict | None, report: MineReport, recipe: Recipe, recipe_source: dict | None
) -> None:
    """Write .state.json, unless a no-op would write the same state again."""
    prev = {} if state is None or report.mode == "full" else state  # what the counts add to
    new_state = {
        "version": ms.STATE_VERSION,
        "repo": recipe.name,
        "source": report.source,
        "last_sha": report.head,
        "mined_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "recipe_digest": recipe.digest(),
        "upstream": recipe.upstream,
        "families": recipe.families,
        "commits_mined": prev.get("commits_mined", 0) + report.commits,
        "without_pr": prev.get("without_pr", 0) + report.without_pr,
        "recipe_source": recipe_source,
    }
    if report.mode != "noop" or not state or dict(state, mined_at=0) != dict(new_state, mined_at=0):
        text = json.dumps(new_state, indent=2, ensure_ascii=False) + "\n"
        ms.atomic_write(folder / ms.STATE_FILE, text)


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
