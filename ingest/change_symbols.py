"""Name the definitions a change touches: every changed line of a file is looked up in the
definition spans of the file before (deleted lines) and after (added lines) the change.

Spans come from tree-sitter; lines that fall in a region tree-sitter could not parse are
looked up in the brace scanner's spans (C family) or an indentation scanner's (Python).
Spans are cached per blob id, so a blob that is the "after" of one commit and the
"before" of the next is read and parsed once.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby, repeat
from typing import NamedTuple

from kbase.ingest.definitions import (
    CLASS,
    FUNCTION,
    KERNEL,
    METHOD,
    FileDefs,
    Span,
    grammar_for,
)
from kbase.ingest.defs_cache import SCAN_PENDING, DefsCache, change_key
from kbase.ingest.tree_parse import HeldTrees, _parse_both, py_scan_defs, scan_for

__all__ = ["Named", "Owners", "SymbolNamer", "_parse_both", "py_scan_defs", "scan_for"]

CACHE_BLOBS = 2048


@dataclass
class Named:
    """Symbols of one file change, in order of first appearance, each with who named it."""

    symbols: list[str] = field(default_factory=list)
    named_by: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # changed lines inside each symbol
    problem: str | None = None
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def add(self, span: Span, method: str, n: int = 1) -> None:
        i = self._index.get(span.name)
        if i is None:
            self._index[span.name] = len(self.symbols)
            self.symbols.append(span.name)
            self.named_by.append(method)
            self.kinds.append(span.kind)
            self.lines.append(n)
            return
        self.lines[i] += n


class SymbolNamer:
    """Definitions of the blobs a stream of file changes needs, newest change first.

    Each blob is parsed at most once: from the in-memory cache, else the on-disk `cache`,
    else tree-sitter, incrementally from the tree of the version of the same file parsed
    last when the hunks that link the two are known (the new side of one change is the old
    side of the next older change to that file)."""

    lag = 0  # commits whose symbols may be planned ahead of the one `finish`ed (parse_worker)

    def __init__(
        self,
        read_blob: Callable[[str], bytes | None],
        read_many: Callable[[list[str]], dict[str, bytes | None]] | None = None,
        cache: DefsCache | None = None,
    ):
        self.read_blob = read_blob
        self.read_many = read_many
        self.disk = cache
        self._pending: dict[str, bytes | None] = {}
        # Owners, None (the blob cannot be read), or a parse a worker has not answered yet
        self._cache: OrderedDict[str, object] = OrderedDict()
        self.trees = HeldTrees()
        # path -> (old blob, new blob, hunks) of the last change met: how to edit the tree of
        # the new blob into one for the old blob when the old side was not needed then
        self._prev: dict[str, tuple[str | None, str | None, list]] = {}
        self._missed: set[str] = set()  # looked up on disk by `prefetch`, not there
        # change key -> what the disk cache holds for a file change of the current commit
        self._answers: dict[str, tuple] = {}
        self._asked: set[str] = set()  # change keys `prefetch` looked up
        self._answered_blobs: set[str] = set()  # blobs those answers spared reading
        self.parsed = 0
        self.incremental = 0

    @property
    def cached(self) -> int:
        """Blobs whose definitions came from the disk cache instead of a parse."""
        return (self.disk.hits if self.disk is not None else 0) + len(self._answered_blobs)

    def _defs(self, lang: str, blob: str, path: str = "", base: tuple | None = None) -> object:
        """The owners of the blob's lines from (tree-sitter defs, scanner defs where the parse
        has ERROR regions), or None when the blob cannot be read (either possibly still to
        come from a worker: `settle`). `base`: (other blob, hunks, to_old) to parse
        incrementally from."""
        key = f"{blob}:{lang}"
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        got: tuple[FileDefs, FileDefs | None] | None = None
        if blob not in self._pending and key not in self._missed and self.disk is not None:
            got = self.disk.get(blob, lang)
        self._missed.discard(key)
        if got is not None:
            scanner = self._scanner(lang, blob) if got[1] is SCAN_PENDING else None
            owners: object = Owners(got, scanner)
        else:
            owners = self._parse(lang, blob, path, base)
        self._cache[key] = owners
        if len(self._cache) > CACHE_BLOBS:
            self._cache.popitem(last=False)
        return owners

    def _parse(self, lang: str, blob: str, path: str, base: tuple | None) -> object:
        """Read and parse a blob no cache holds: its Owners, or None if it cannot be read."""
        data = self._pending.pop(blob) if blob in self._pending else self.read_blob(blob)
        if data is None:
            return None
        self.parsed += 1
        got, incremental = self.trees.parse(lang, blob, path, base, data)
        self.incremental += incremental
        if self.disk is not None:
            self.disk.put(blob, lang, got)
        # the scan of error regions from the bytes in hand when a change needs it
        return Owners(got, self._scanner(lang, blob, data) if got[1] is SCAN_PENDING else None)

    def dispatch(self) -> None:
        """Send the parses planned so far on their way (to a worker: parse_worker.py)."""

    def settle(self, got: object) -> Owners | None:
        """What `_defs` gave, once known (a worker's namer waits for its answer here)."""
        return got  # type: ignore[return-value]

    def _scanner(
        self, lang: str, blob: str, held: bytes | None = None
    ) -> Callable[[], FileDefs | None]:
        """The scan of a blob's error regions, made when first needed (few changes fall in
        those regions); the blob is read again then unless `held`."""

        def scan() -> FileDefs | None:
            data = held if held is not None else self.read_blob(blob)
            return scan_for(lang, data) if data is not None else None

        return scan

    def prefetch(self, changes: list[tuple[str, str | None, str | None, list]]) -> None:
        """Read, in one round trip, every blob that `name` will need for these file changes
        and that no cache holds."""
        self._answers.clear()
        self._asked.clear()
        want: list[str] = []
        for path, old_blob, new_blob, hunks in changes:
            lang = grammar_for(path)
            if lang is None:
                continue
            if self.disk is not None:
                key = change_key(lang, old_blob, new_blob, hunks)
                self._asked.add(key)
                got = self.disk.get_change(key)
                if got is not None:
                    self._answers[key] = got
                    continue
            if self.read_many is None:
                continue
            for blob, needed in (
                (old_blob, any(h[1] for h in hunks)),
                (new_blob, any(h[3] for h in hunks)),
            ):
                if not blob or not needed or f"{blob}:{lang}" in self._cache:
                    continue
                if self.disk is not None:
                    got = self.disk.get(blob, lang)
                    if got is not None:
                        scanner = self._scanner(lang, blob) if got[1] is SCAN_PENDING else None
                        self._cache[f"{blob}:{lang}"] = Owners(got, scanner)
                        continue
                    self._missed.add(f"{blob}:{lang}")
                want.append(blob)
        if len(want) > 1 and self.read_many is not None:
            self._pending.update(self.read_many(want))

    def name(
        self,
        path: str,
        old_blob: str | None,
        new_blob: str | None,
        hunks: list[tuple[int, int, int, int]],
    ) -> Named | None:
        """Symbols for one file change, or None when the language has no grammar."""
        return self.finish(self.plan(path, old_blob, new_blob, hunks))

    def plan(
        self,
        path: str,
        old_blob: str | None,
        new_blob: str | None,
        hunks: list[tuple[int, int, int, int]],
    ) -> Named | Plan | None:
        """The first half of `name`: every cache decision and parse request, in stream order
        (`finish` turns it into symbols, possibly after later changes were planned)."""
        lang = grammar_for(path)
        if lang is None:
            return None
        need_old = any(on for _, on, _, _ in hunks)
        need_new = any(nn for _, _, _, nn in hunks)
        prev = self._prev.get(path)
        self._prev[path] = (old_blob, new_blob, hunks)
        key = change_key(lang, old_blob, new_blob, hunks) if self.disk is not None else ""
        answer = self._answers.pop(key, None) if key else None
        if answer is None and key and key not in self._asked:
            answer = self.disk.get_change(key)  # type: ignore[union-attr]
        if answer is not None:
            for blob, needed in ((old_blob, need_old), (new_blob, need_new)):
                if blob and needed and f"{blob}:{lang}" not in self._cache:
                    self._answered_blobs.add(blob)
            return _from_answer(answer)
        sides: list[tuple[str, str, object]] = []
        for side, blob, needed in (("new", new_blob, need_new), ("old", old_blob, need_old)):
            if not needed or not blob:
                continue
            if side == "old":
                base = (new_blob, hunks, True) if new_blob else None
            else:  # the old side of the newer change to this file, when that was not parsed
                base = (prev[1], prev[2], True) if prev and prev[0] == blob and prev[1] else None
            sides.append((side, blob, self._defs(lang, blob, path, base)))
        return Plan(path, key, hunks, sides)

    def finish(self, plan: Named | Plan | None) -> Named | None:
        """The symbols of a planned file change."""
        if plan is None or isinstance(plan, Named):
            return plan
        path, key, hunks, sides = plan
        out = Named()
        for side, blob, got in sides:
            owners = self.settle(got)
            if owners is None:
                out.problem = f"blob {blob[:12]} ({side} {path}) is missing from the repository"
                continue
            _name_lines(out, owners, hunks, side == "new")
        if key and out.problem is None:
            self.disk.put_change(key, (out.symbols, out.named_by, out.kinds, out.lines))  # type: ignore[union-attr]
        return out


class Plan(NamedTuple):
    """A file change whose blobs' definitions are asked for (`SymbolNamer.plan`)."""

    path: str
    key: str  # its key in the disk cache's changes, "" without a disk cache
    hunks: list[tuple[int, int, int, int]]
    sides: list[tuple[str, str, object]]  # (new|old, blob, what `_defs` gave)


def _from_answer(answer: tuple) -> Named:
    symbols, named_by, kinds, lines = answer
    out = Named(list(symbols), list(named_by), list(kinds), list(lines))
    out._index = {name: i for i, name in enumerate(out.symbols)}
    return out


class Owners:
    """Which definition owns each line of one blob: the tree-sitter owner, or the scanner's
    inside the parse's ERROR regions. Lines are looked up a hunk at a time, through slices of
    the per-line tables, so a hunk costs C loops over its lines and Python work per run."""

    __slots__ = ("defs", "_governed", "_scan")

    def __init__(
        self,
        defs: tuple[FileDefs, FileDefs | None],
        scan: Callable[[], FileDefs | None] | None = None,
    ):
        self.defs = defs
        self._governed: list[tuple[int, int]] | None = None
        self._scan = scan  # makes the scanner's spans when `defs` holds SCAN_PENDING

    def name_lines(self, out: Named, start: int, n: int) -> None:
        """Add the owner of each of the lines start .. start+n-1, one run at a time."""
        ts, scan = self.defs
        lo, hi = max(start, 0), start + n  # lines lo .. hi-1
        if hi <= lo:
            return
        seg = ts.table()[lo:hi]
        overlap: list[tuple[int, int]] = []
        if scan is not None and ts.errors:
            if self._governed is None:
                self._governed = _governed(ts.errors)
            overlap = [
                (max(a, lo), min(b, hi - 1)) for a, b in self._governed if a < hi and b >= lo
            ]
        if overlap and scan is SCAN_PENDING:
            scan = self._scan() if self._scan is not None else None
            self.defs = (ts, scan)
            if scan is None:  # the blob is gone since it was parsed: tree-sitter alone
                overlap = []
        if not overlap:
            for sp, run in groupby(seg):
                if sp is not None:
                    out.add(sp, ts.method, len(list(run)))
            return
        assert scan is not None  # overlap is only found with a scan
        cells: list = list(zip(seg, repeat(ts.method)))
        stable = scan.table()
        for a, b in overlap:
            if b - lo + 1 > len(cells):  # the error region runs past the last definition
                cells.extend(repeat((None, ts.method), b - lo + 1 - len(cells)))
            part = stable[a : b + 1]
            part += [None] * (b + 1 - a - len(part))
            cells[a - lo : b - lo + 1] = zip(part, repeat("scanner"))
        for (sp, method), run in groupby(cells):
            if sp is not None:
                out.add(sp, method, len(list(run)))


def _governed(errors: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The lines `FileDefs.in_error` answers yes for, as ranges: a line is judged by the last
    error range (in sorted order) that starts at or before it, so a range nested in a longer
    one ends the longer one's say where it starts."""
    out: list[tuple[int, int]] = []
    for i, (a, b) in enumerate(errors):
        nxt = errors[i + 1][0] if i + 1 < len(errors) else None
        if nxt == a:
            continue  # a later range with the same start governs these lines
        hi = b if nxt is None else min(b, nxt - 1)
        if hi >= a:
            out.append((a, hi))
    return out


def _name_lines(out: Named, owners: Owners, hunks: list, new: bool) -> None:
    """Add the owner of every changed line on one side."""
    for os_, on, ns, nn in hunks:
        start, n = (ns, nn) if new else (os_, on)
        if n:
            owners.name_lines(out, start, n)


@lru_cache(maxsize=1 << 16)
def rank_key(name: str, kind: str, path: str, lines: int) -> tuple[int, int, str]:
    """Kernels first, then public functions and methods, then private ones, classes and
    macros; anything in a test file or named like a test last."""
    last = re.split(r"::|\.", name)[-1]
    low = path.lower()
    is_test = (
        "/test" in f"/{low}"
        or low.rsplit("/", 1)[-1].startswith("test_")
        or last.startswith("test")
        or last.startswith("Test")
    )
    if is_test:
        group = 5
    elif kind == KERNEL:
        group = 0
    elif kind in (FUNCTION, METHOD) and not last.startswith("_"):
        group = 1
    elif kind in (FUNCTION, METHOD):
        group = 2
    elif kind == CLASS:
        group = 3
    else:
        group = 4
    return group, -lines, name
