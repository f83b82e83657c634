"""Name the definitions a change touches: deleted lines in the spans of the file before, added
lines in those after (docs/pr-archive.md "Symbols from parsed code")."""

from __future__ import annotations

import re
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby

from kbase.ingest import definitions as defs
from kbase.ingest.brace_scan import scan_defs
from kbase.ingest.definitions import FileDefs, edit_tree, grammar_for, line_offsets, parse_tree

CACHE_BLOBS = 2048
# trees of the last parsed version per file, for incremental parses: bounded by count and by
# the bytes of source they hold (a tree costs a few times its source)
HOLD_TREES = 4096
HOLD_BYTES = 96 << 20


@dataclass
class Named:
    """Symbols of one file change, in order of first appearance, each with who named it."""

    symbols: list[str] = field(default_factory=list)
    named_by: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # changed lines inside each symbol
    problem: str | None = None
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def add(self, span: defs.Span, method: str, lines: int = 1) -> None:
        i = self._index.setdefault(span.name, len(self.symbols))
        if i == len(self.symbols):
            self.symbols.append(span.name)
            self.named_by.append(method)
            self.kinds.append(span.kind)
            self.lines.append(0)
        self.lines[i] += lines


def apply_named(f, named: Named) -> None:
    """Put a file change's symbols on its FileFacts."""
    f.symbols, f.named_by, f.kinds = named.symbols, named.named_by, named.kinds
    f.weights, f.problem = named.lines, named.problem


def primary_defs(lang: str, data: bytes, old_tree=None) -> tuple[FileDefs, object]:
    """(the definitions a blob's lines are looked up in first, its tree or None): tree-sitter's,
    or the brace scanner's for C-family text tree-sitter cannot read (its ERROR regions: Owners)."""
    if lang != "py":
        lines = data.count(b"\n")
        unbalanced = abs(data.count(b"{") - data.count(b"}")) > 2
        if unbalanced or (lines > 40 and data.count(b";") * 20 < lines):
            # braces that do not match, or text with hardly a statement in it, defeat the
            # grammar (and its error recovery is slow): the scanner reads it
            return scan_defs(data), None
    ts, tree = parse_tree(lang, data, old_tree)
    if ts is None:  # past the parse budget
        return (FileDefs() if lang == "py" else scan_defs(data)), None
    return ts, tree


class Owners:
    """Which definition owns each line of one blob: tree-sitter's, or in a C-family parse's ERROR
    regions the brace scanner's (scanned when a changed line first falls there: few do)."""

    __slots__ = ("ts", "_scan", "_scanned")

    def __init__(self, ts: FileDefs, scan: Callable[[], FileDefs] | None = None):
        self.ts, self._scan = ts, scan
        self._scanned: FileDefs | None = None

    def name_lines(self, out: Named, start: int, n: int) -> None:
        """Add the owner of each of the lines start .. start+n-1."""
        ts = self.ts
        if self._scan is None:  # no ERROR region: a run of lines owned alike is added at once
            for sp, run in groupby(ts.table()[max(start, 0) : start + n]):
                if sp is not None:
                    out.add(sp, ts.method, len(list(run)))
            return
        for line in range(max(start, 0), start + n):
            if ts.in_error(line):
                scan = self._scanned
                if scan is None:
                    scan = self._scanned = self._scan()
                sp, method = scan.owner(line), "scanner"
            else:
                sp, method = ts.owner(line), ts.method
            if sp is not None:
                out.add(sp, method)


class SymbolNamer:
    """Definitions of the blobs a stream of file changes needs, newest change first: each blob
    parsed at most once while it stays among the last CACHE_BLOBS, incrementally where it can be
    (the new side of one change is the old side of the next older change to that file)."""

    def __init__(self, read_blob: Callable[[str], bytes | None]):
        self.read_blob = read_blob
        # blob:lang -> Owners, or None (the blob cannot be read)
        self._owners: OrderedDict[str, Owners | None] = OrderedDict()
        # path -> (blob, tree, contents, its line offsets or None) of the version parsed last
        self._trees: OrderedDict[str, tuple[str, object, bytes, array[int] | None]] = OrderedDict()
        self._held_bytes = 0
        # path -> (old blob, new blob, hunks) of the last change met: how to edit the tree of
        # the new blob into one for the old blob when the old side was not needed then
        self._prev: dict[str, tuple[str | None, str | None, list]] = {}
        self.parsed = self.incremental = 0

    def name_commit(self, commit, then: Callable) -> None:
        """Name the symbols of every file of `commit` that has a grammar, then hand it on."""
        for f in commit.files:
            if f.hunks and (named := self.name(f.path, f.old_blob, f.new_blob, f.hunks)):
                apply_named(f, named)
        then(commit)

    def drain(self) -> None:
        """Nothing waits here (NamePool's commits may)."""

    def name(
        self, path: str, old_blob: str | None, new_blob: str | None, hunks: list[defs.Hunk]
    ) -> Named | None:
        """Symbols for one file change, or None when the language has no grammar."""
        lang = grammar_for(path)
        if lang is None:
            return None
        prev = self._prev.get(path)
        self._prev[path] = (old_blob, new_blob, hunks)
        out = Named()
        for new, blob in ((True, new_blob), (False, old_blob)):
            if not blob or not any(h[3] if new else h[1] for h in hunks):
                continue
            if not new:
                base = (new_blob, hunks) if new_blob else None
            else:  # the old side of the newer change to this file, when that was not parsed
                base = (prev[1], prev[2]) if prev and prev[0] == blob and prev[1] else None
            owners = self._owners_of(lang, blob, path, base)
            if owners is None:
                side = "new" if new else "old"
                out.problem = f"blob {blob[:12]} ({side} {path}) is missing from the repository"
                continue
            for os_, on, ns, nn in hunks:
                start, n = (ns, nn) if new else (os_, on)
                if n:
                    owners.name_lines(out, start, n)
        return out

    def _owners_of(self, lang: str, blob: str, path: str, base: tuple | None) -> Owners | None:
        key = f"{blob}:{lang}"
        if key in self._owners:
            self._owners.move_to_end(key)
            return self._owners[key]
        data = self.read_blob(blob)
        owners = None
        if data is not None:
            self.parsed += 1
            ts = self._parse(lang, blob, path, base, data)
            owners = Owners(ts, (lambda: scan_defs(data)) if ts.errors else None)
        self._owners[key] = owners
        if len(self._owners) > CACHE_BLOBS:
            self._owners.popitem(last=False)
        return owners

    def _parse(self, lang: str, blob: str, path: str, base: tuple | None, data: bytes) -> FileDefs:
        """Parse a blob, from the edited tree of the version of `path` parsed last when that
        is `base`'s blob (`base`: (that blob, the hunks from this blob to it))."""
        old_tree = offsets = None
        held = self._trees.get(path)
        if base is not None and held is not None and held[0] == base[0]:
            self.incremental += 1
            # each version's line offsets are found once: as the edit's destination here,
            # kept with its tree for the edit from it to the next older version
            src_offsets = held[3] if held[3] is not None else line_offsets(held[2])
            offsets = line_offsets(data)
            old_tree = edit_tree(held[1], src_offsets, offsets, base[1])
        ts, tree = primary_defs(lang, data, old_tree)
        if tree is not None and path:
            if (old := self._trees.pop(path, None)) is not None:
                self._held_bytes -= len(old[2])
            self._trees[path] = (blob, tree, data, offsets)
            self._held_bytes += len(data)
            while len(self._trees) > HOLD_TREES or self._held_bytes > HOLD_BYTES:
                _, (_, _, gone, _) = self._trees.popitem(last=False)
                self._held_bytes -= len(gone)
        return ts


@lru_cache(maxsize=1 << 16)
def rank_key(name: str, kind: str, path: str, lines: int) -> tuple[int, int, str]:
    """Kernels first, then public functions and methods, then private ones, classes and
    macros; anything in a test file or named like a test last."""
    last = re.split(r"::|\.", name)[-1]
    if "/test" in f"/{path.lower()}" or last.startswith(("test", "Test")):  # a test* folder or file
        group = 5
    elif kind in (defs.FUNCTION, defs.METHOD):
        group = 2 if last.startswith("_") else 1
    else:
        group = {defs.KERNEL: 0, defs.CLASS: 3}.get(kind, 4)
    return group, -lines, name
