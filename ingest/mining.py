"""`kbase mine`: turn a clone's history (its main line and what merges bring in) into PR cards.
Order of writes makes an interrupted mine safe: cards atomically, `.state.json` last
(docs/pr-archive.md "Incremental runs")."""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


# Which commits of a range carry history worth a card, from the commit graph alone (no diffs):
# the spine, PR merges and transport merges as docs/pr-archive.md "Mining" describes them.
GRAPH_FORMAT = "%H%x1f%P%x1f%s"


@dataclass
class Node:
    parents: list[str]
    pr: int | None  # the PR its subject names, if any


@dataclass
class Plan:
    """`mine`: the commits to stream, newest first; `role`: why each commit is (not) mined."""

    order: list[str]  # every commit of the range, newest first (topological)
    nodes: dict[str, Node]
    mine: list[str] = field(default_factory=list)
    role: dict[str, str] = field(default_factory=dict)  # spine | side | pr-internal | transport


def plan(order: list[str], nodes: dict[str, Node], head: str) -> Plan:
    """Decide the role of every commit in the range `order` (newest first) whose tip is `head`."""
    out = Plan(order=order, nodes=nodes)
    claimed: dict[str, str] = out.role

    def line(tip: str, role: str) -> None:
        chain: list[str] = []
        x: str | None = tip
        while x is not None and x in nodes and x not in claimed:
            claimed[x] = role
            chain.append(x)
            x = next(iter(nodes[x].parents), None)  # its first parent
        # oldest merge first: a commit reachable from two merges belongs to the older one, as
        # `git log P1..P2` of each merge would say
        for sha in reversed(chain):
            n = nodes[sha]
            if len(n.parents) < 2:
                continue
            if n.pr is not None:
                for p in n.parents[1:]:
                    _claim_all(p, nodes, claimed)
            else:
                claimed[sha] = "transport"
                for p in n.parents[1:]:
                    line(p, "side")

    line(head, "spine")
    # commits the walk never reached (a range whose tip is not `head`): mine them as side work
    for sha in order:
        claimed.setdefault(sha, "side")
    out.mine = [s for s in order if claimed[s] in ("spine", "side")]
    return out


def _claim_all(tip: str, nodes: dict[str, Node], claimed: dict[str, str]) -> None:
    stack = [tip]
    while stack:
        x = stack.pop()
        if x not in nodes or x in claimed:
            continue
        claimed[x] = "pr-internal"
        stack.extend(nodes[x].parents)


def read_plan(repo: GitRepo, rev_range: str, head: str) -> Plan:
    from kbase.ingest import classify

    order: list[str] = []
    nodes: dict[str, Node] = {}
    for line in repo.run("log", "--topo-order", f"--format={GRAPH_FORMAT}", rev_range).splitlines():
        if not line.strip():
            continue
        sha, parents, subject = (line.split("\x1f", 2) + ["", ""])[:3]
        pr = classify.pr_number(subject)
        nodes[sha] = Node(parents.split(), pr[0] if pr else None)
        order.append(sha)
    return plan(order, nodes, head)
