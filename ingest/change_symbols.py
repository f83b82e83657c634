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

from kbase.ingest.brace_scan import scan_defs
from kbase.ingest.definitions import (
    CLASS,
    FUNCTION,
    KERNEL,
    METHOD,
    FileDefs,
    Span,
    edit_tree,
    grammar_for,
    line_offsets,
    parse_tree,
)
from kbase.ingest.defs_cache import SCAN_PENDING, DefsCache, change_key

CACHE_BLOBS = 2048
# trees of the last parsed version per file, for incremental parses: bounded by count and by
# the bytes of source they hold (a tree costs a few times its source)
HOLD_TREES = 4096
HOLD_BYTES = 96 << 20
_PY_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_]\w*)")


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


def py_scan_defs(src: bytes) -> FileDefs:
    """Python definitions by indentation, for the rare file tree-sitter-python cannot parse."""
    lines = src.decode("utf-8", "replace").splitlines()
    out = FileDefs(method="scanner")
    open_defs: list[tuple[int, int, str, str]] = []  # (indent, start, name, kind)

    def close(upto_indent: int, end: int) -> None:
        while open_defs and open_defs[-1][0] >= upto_indent:
            ind, start, name, kind = open_defs.pop()
            out.spans.append(Span(start, end, name, kind))

    last_code = 0
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        close(indent, last_code) if open_defs and indent <= open_defs[-1][0] else None
        m = _PY_DEF.match(line)
        if m:
            outer = open_defs[-1][2] if open_defs else None
            kind = CLASS if m.group(2) == "class" else (METHOD if outer else FUNCTION)
            start = i
            while start > 1 and lines[start - 2].strip().startswith("@"):
                start -= 1  # decorators belong to the definition
            name = f"{outer}.{m.group(3)}" if outer else m.group(3)
            open_defs.append((indent, start, name, kind))
        last_code = i
    close(0, last_code)
    return out.finish()


def _parse_both(lang: str, data: bytes, old_tree=None, lazy: bool = False):
    """(primary spans, scanner spans for the primary's error regions, tree or None). `lazy`:
    the scanner's spans are SCAN_PENDING where the primary has errors (`scan_for` makes them
    when a changed line falls in an error region)."""
    if lang == "py":
        ts, tree = parse_tree(lang, data, old_tree)
        if ts is None:
            return py_scan_defs(data), None, None
        return ts, (_scan_or_pending(lang, data, lazy) if ts.errors else None), tree
    lines = data.count(b"\n")
    if abs(data.count(b"{") - data.count(b"}")) > 2 or (
        lines > 40 and data.count(b";") * 20 < lines
    ):
        # braces that do not match, or text with hardly a statement in it, defeat the grammar
        # (and its error recovery is slow): the scanner reads it
        return scan_defs(data), None, None
    ts, tree = parse_tree(lang, data, old_tree)
    if ts is None:
        return scan_defs(data), None, None
    return ts, (_scan_or_pending(lang, data, lazy) if ts.errors else None), tree


def scan_for(lang: str, data: bytes) -> FileDefs:
    """The scanner that reads a language's error regions."""
    return py_scan_defs(data) if lang == "py" else scan_defs(data)


def _scan_or_pending(lang: str, data: bytes, lazy: bool) -> FileDefs:
    return SCAN_PENDING if lazy else scan_for(lang, data)


class SymbolNamer:
    """Definitions of the blobs a stream of file changes needs, newest change first.

    Each blob is parsed at most once: from the in-memory cache, else the on-disk `cache`,
    else tree-sitter, incrementally from the tree of the version of the same file parsed
    last when the hunks that link the two are known (the new side of one change is the old
    side of the next older change to that file)."""

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
        self._cache: OrderedDict[str, Owners | None] = OrderedDict()
        # path -> (blob, tree, contents, its line offsets or None) of the version parsed last
        self._trees: OrderedDict[str, tuple[str, object, bytes, object]] = OrderedDict()
        self._held_bytes = 0
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

    def _hold(self, path: str, blob: str, tree: object, data: bytes, offsets: object) -> None:
        old = self._trees.pop(path, None)
        if old is not None:
            self._held_bytes -= len(old[2])
        self._trees[path] = (blob, tree, data, offsets)
        self._held_bytes += len(data)
        while len(self._trees) > HOLD_TREES or self._held_bytes > HOLD_BYTES:
            _, (_, _, gone, _) = self._trees.popitem(last=False)
            self._held_bytes -= len(gone)

    def _defs(
        self, lang: str, blob: str, path: str = "", base: tuple | None = None
    ) -> Owners | None:
        """The owners of the blob's lines from (tree-sitter defs, scanner defs where the parse
        has ERROR regions), or None when the blob cannot be read. `base`: (other blob, hunks,
        to_old) to parse incrementally from."""
        key = f"{blob}:{lang}"
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        got: tuple[FileDefs, FileDefs | None] | None = None
        data: bytes | None = None
        if blob not in self._pending and key not in self._missed and self.disk is not None:
            got = self.disk.get(blob, lang)
        self._missed.discard(key)
        if got is None:
            data = self._pending.pop(blob) if blob in self._pending else self.read_blob(blob)
            if data is not None:
                self.parsed += 1
                old_tree = offsets = None
                held = self._trees.get(path)
                if base is not None and held is not None and held[0] == base[0]:
                    # each version's line offsets are found once: as the edit's destination
                    # here, kept with its tree for the edit from it to the next older version
                    src_offsets = held[3] if held[3] is not None else line_offsets(held[2])
                    offsets = line_offsets(data)
                    old_tree = edit_tree(
                        held[1], held[2], data, base[1], base[2], (src_offsets, offsets)
                    )
                    self.incremental += 1
                ts, scan, tree = _parse_both(lang, data, old_tree, lazy=True)
                got = (ts, scan)
                if self.disk is not None:
                    self.disk.put(blob, lang, got)
                if tree is not None and path:
                    self._hold(path, blob, tree, data, offsets)
        owners = None
        if got is not None:
            scanner = None
            if got[1] is SCAN_PENDING:  # from the bytes in hand, else read again when needed
                scanner = self._scanner(lang, blob, data)
            owners = Owners(got, scanner)
        self._cache[key] = owners
        if len(self._cache) > CACHE_BLOBS:
            self._cache.popitem(last=False)
        return owners

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
        out = Named()
        for side, blob, needed in (("new", new_blob, need_new), ("old", old_blob, need_old)):
            if not needed or not blob:
                continue
            if side == "old":
                base = (new_blob, hunks, True) if new_blob else None
            else:  # the old side of the newer change to this file, when that was not parsed
                base = (prev[1], prev[2], True) if prev and prev[0] == blob and prev[1] else None
            got = self._defs(lang, blob, path, base)
            if got is None:
                out.problem = f"blob {blob[:12]} ({side} {path}) is missing from the repository"
                continue
            _name_lines(out, got, hunks, side == "new")
        if key and out.problem is None:
            self.disk.put_change(key, (out.symbols, out.named_by, out.kinds, out.lines))  # type: ignore[union-attr]
        return out


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
