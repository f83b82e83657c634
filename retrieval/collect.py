"""What the indexer reads: every skill, draft and PR card under a root, as index entries, with
what is unchanged since the previous generation taken from it instead of parsed again; and the
digest of some modules' source and packaged data files that such caches (parsed entries, BM25
tokens, mined cards) are keyed by, so they miss as soon as the code that made their contents
changes. Modules are found, not imported, so checking a cache costs no import."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat as S
from collections.abc import Iterable
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a cold search reads _file_sig alone (api_search.skills_changed)
    from kbase.schema import Entry, Problem


def module_files(name: str) -> list[str]:
    """The source files of module `name`: its file or, for a package (kbase.schema), every
    module of it, sorted; [] when it is not found."""
    spec = find_spec(name)
    if spec is None or spec.origin is None:
        return []
    if spec.submodule_search_locations:  # a package's code is its modules too, not __init__ only
        locs = spec.submodule_search_locations
        return sorted(str(p) for loc in locs for p in Path(loc).glob("*.py"))
    return [spec.origin]


def source_digest(
    modules: Iterable[str], data: Iterable[str] = (), prefix: str = "", length: int = 16
) -> str:
    """sha256 over `prefix`, each module's source (`name=none;` for one not found) and each
    file of kbase.data named in `data`, cut to `length` hex digits."""
    h = hashlib.sha256(prefix.encode())
    for name in modules:
        files = module_files(name)
        if not files:
            h.update(f"{name}=none;".encode())
        for path in files:
            with open(path, "rb") as fh:
                h.update(fh.read())
    if data:
        from importlib import resources

        for name in data:
            h.update(resources.files("kbase.data").joinpath(name).read_bytes())
    return h.hexdigest()[:length]


def parser_fingerprint() -> str:
    """Changes whenever the code that turns a card into an Entry changes: cached entries of an
    earlier generation are reused only under the same fingerprint."""
    ingest = "cards card_history card_format front_matter skills markdown".split()
    return source_digest([f"kbase.ingest.{m}" for m in ingest] + ["kbase.drafts", "kbase.schema"])


def _file_sig(p: Path | str) -> list[int] | None:
    """[size, mtime_ns, inode] of a plain file; None for a symlink or a missing file."""
    try:
        st = os.lstat(p)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino] if S.S_ISREG(st.st_mode) else None


def _cards(
    root: Path,
    reuse: dict[str, Entry],
    stats: dict[str, list[int]],
    new_stats: dict[str, list[int]],
) -> tuple[list[Entry], list[Problem]]:
    """Every PR card as an Entry; a card unchanged since the previous generation is taken from
    it instead of being parsed again: parsing thousands of YAML cards was most of an
    incremental re-index (issue #11). Unchanged means the same (size, mtime, inode) as recorded
    then, for a plain file; else the same content hash. `new_stats` receives this run's."""
    from kbase.ingest.cards import CardProblems, card_entry, card_paths, load_card
    from kbase.ingest.files import FileProblem, display_path, read_text

    entries: list[Entry] = []
    problems: list[Problem] = []
    prefix = str(root) + os.sep
    for sp in card_paths(root):
        # card_paths joins onto root: the relative path is a slice (relative_to cost ~15 us a card)
        shown = sp[len(prefix) :] if sp.startswith(prefix) else display_path(Path(sp), root)
        old = reuse.get(shown)
        sig = _file_sig(sp)
        if sig is not None:
            new_stats[shown] = sig
        if old is not None:
            if sig is not None and stats.get(shown) == sig:
                entries.append(old)
                continue
            with contextlib.suppress(FileProblem):
                text = read_text(Path(sp), root)
                if hashlib.sha256(text.encode("utf-8")).hexdigest() == old.content_hash:
                    entries.append(old)
                    continue
        try:
            entries.append(card_entry(load_card(Path(sp), root)))
        except CardProblems as cp:
            problems.extend(cp.problems)
            new_stats.pop(shown, None)
    return entries, problems


def collect_entries(
    root: Path,
    reuse: dict[str, Entry] | None = None,
    stats: dict[str, list[int]] | None = None,
    new_stats: dict[str, list[int]] | None = None,
) -> tuple[list[Entry], list[Problem], set[str]]:
    """Every skill and PR card under root, the problems found, and the paths that failed.
    `reuse`: path -> PR-card Entry of the previous generation (same parser fingerprint);
    `stats`/`new_stats`: the card file signatures recorded then / found now (see _cards)."""
    from kbase.ingest.files import display_path
    from kbase.ingest.skills import entry_of, find_skill_files

    from kbase.drafts import find_draft_files
    from kbase.schema import Problem  # at run time: a duplicate id is reported with it

    entries: list[Entry] = []
    problems: list[Problem] = []
    failed: set[str] = set()
    reuse, stats, new_stats = reuse or {}, stats or {}, {} if new_stats is None else new_stats
    files = find_skill_files(root) + find_draft_files(root)  # drafts: searchable, status draft
    # A skill file unchanged since the previous generation (same size, mtime, inode) keeps its
    # entry: parsing every SKILL.md again was a large part of an incremental re-index.
    kept: dict[Path, Entry] = {}
    for f in files:
        shown = display_path(f, root)
        sig = _file_sig(f)
        if sig is not None:
            new_stats[shown] = sig
        old = reuse.get(shown)
        if old is not None and old.kind != "pr" and sig is not None and stats.get(shown) == sig:
            kept[f] = old
    for f in files:
        if f in kept:
            entries.append(kept[f])
            continue
        entry, bad = entry_of(f, root)
        if entry is not None:
            entries.append(entry)
        else:
            problems.extend(bad)
            failed.add(display_path(f, root))
            new_stats.pop(display_path(f, root), None)
    if (root / "pr_archive").is_dir():
        cards, card_problems = _cards(root, reuse, stats, new_stats)
        entries.extend(cards)
        problems.extend(card_problems)
        failed.update(p.path for p in card_problems)
    seen: dict[str, str] = {}
    unique: list[Entry] = []
    for e in entries:
        if e.id in seen:
            msg = f"duplicate id {e.id!r} (also {seen[e.id]})"
            problems.append(Problem(path=e.path, line=1, field="name", message=msg))
            failed.add(e.path)
            continue
        seen[e.id] = e.path
        unique.append(e)
    return unique, problems, failed
