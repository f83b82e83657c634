"""The PR-archive part of `KnowledgeBase`: family timelines and mining (a mixin of kbase.api)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbase.errors import InvalidArgument, NotFound, did_you_mean, nearest

if TYPE_CHECKING:
    from kbase.schema import HistoryResult


def _named(name: str, then: Callable[[], Any] = lambda: None) -> Any:
    """`then()` once `name` is kebab-case; a ValueError from either is a `--name` error. Checked
    here: a recipe file's own name is replaced by this one unvalidated, and `--name ../..` would
    write (and with --full delete) cards outside pr_archive/."""
    from kbase.schema.base import check_kebab

    try:
        check_kebab(name)
        return then()
    except ValueError as exc:
        raise InvalidArgument(f"--name {name!r}: {exc}", "name") from None


class ArchiveAPI:
    if TYPE_CHECKING:  # provided by KnowledgeBase
        root: Path

    def history(
        self, repo: str, family: str | None, paths: list[str] | None = None
    ) -> HistoryResult:
        """The timeline of one kernel family in one archived repo, oldest first (its globs as the
        last mine recorded them); `paths` (globs): every PR and push touching them, no family
        needed. With no pr_archive/ at all the answer says so (`available: false`)."""
        from kbase.ingest.card_history import read_families, timeline
        from kbase.schema import HistoryResult

        if not (self.root / "pr_archive").is_dir():
            return HistoryResult(
                repo=repo,
                family=family,
                available=False,
                message="no PR archive under this root (pr_archive/ is missing)",
            )
        if not (self.root / "pr_archive" / repo).is_dir():
            repos = [p.name for p in (self.root / "pr_archive").iterdir() if p.is_dir()]
            repos = [r for r in repos if not r.startswith(".") and r != "recipes"]
            raise NotFound(
                f"no archive {repo!r} under pr_archive/"
                + did_you_mean(repo, repos, "archives")
                + f" (to add one: `kbase mine --repo PATH --name {repo}`)"
            )
        families = read_families(self.root, repo)
        if paths:
            globs = list(paths) + list(families.get(family, []) if family else [])
        elif not family:
            raise InvalidArgument("name a family or give --path GLOB", "family")
        elif family not in families:
            known = ", ".join(sorted(families)) or "none recorded; mine with a recipe"
            near = nearest(family, families)
            hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
            raise NotFound(f"unknown family {family!r} for {repo} ({hint}known: {known})")
        else:
            globs = list(families[family])
        rows = timeline(self.root, repo, family, globs)
        return HistoryResult.model_validate(
            {"repo": repo, "family": family, "globs": globs, "prs": rows}
        )

    def mine(
        self,
        repo_path: str,
        name: str,
        recipe: str | None = None,
        since: str | None = None,
        full: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> Any:
        """Mine a clone's history (every commit reachable from HEAD, merged branches too) into
        pr_archive/<name>/; returns a MineReport."""
        if since and full:
            raise InvalidArgument("--since and --full cannot be used together", "since")
        from kbase.ingest.mine_state import recipe_fingerprint
        from kbase.ingest.recipes import resolve_recipe

        rec, path = _named(name, lambda: resolve_recipe(recipe, name, self.root))
        from kbase.ingest.mining import mine as run_mine

        return run_mine(
            repo_path,
            self.root,
            rec,
            since=since,
            full=full,
            progress=progress,
            recipe_fingerprint=recipe_fingerprint(path),
        )

    def mine_noop(self, repo_path: str, name: str, recipe: str | None = None) -> Any:
        """The report of `mine` when it can be shown, without the miner or pydantic, that there
        is nothing new (and the archive folder tidied as a no-op tidies it); else None."""
        from kbase.ingest.mine_state import noop_report

        return noop_report(self.root, repo_path, name, recipe)

    def recipe_suggest(self, repo_path: str, name: str, write: bool = False) -> dict[str, Any]:
        """Families proposed from a clone's directories and file names; `write` saves the recipe."""
        from kbase.ingest.recipes import suggest_for_repo

        _named(name)
        text, fams, upstream, left = suggest_for_repo(repo_path, name)
        dest = None
        if write:
            dest = self.root / "pr_archive" / "recipes" / f"{name}.yaml"
            if dest.exists():
                raise InvalidArgument(f"{dest} exists; edit it or remove it first", "name")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        return {
            "name": name,
            "upstream": upstream,
            "families": fams,
            "left_out": left,
            "written": str(dest) if dest else None,
            "text": text,
        }

    def recipe_lint(self, recipe: str, repo_path: str) -> dict[str, Any]:
        """Globs that match nothing in the clone's history or pull in another family's files."""
        from kbase.ingest.mining import open_repo
        from kbase.ingest.recipes import find_recipe, lint_families, load_recipe_file, repo_paths

        path = find_recipe(recipe, self.root)
        rec = load_recipe_file(path, self.root)
        paths = repo_paths(str(open_repo(repo_path).git_dir))
        return {
            "recipe": str(path),
            "paths": len(paths),
            "problems": lint_families(rec.families, paths),
        }
