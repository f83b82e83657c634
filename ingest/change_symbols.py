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
    parse_tree,
)

CACHE_BLOBS = 2048
_PY_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_]\w*)")


@dataclass
class Named:
    """Symbols of one file change, in order of first appearance, each with who named it."""

    symbols: list[str] = field(default_factory=list)
    named_by: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # changed lines inside each symbol
    problem: str | None = None

    def add(self, span: Span, method: str) -> None:
        try:
            i = self.symbols.index(span.name)
        except ValueError:
            self.symbols.append(span.name)
            self.named_by.append(method)
            self.kinds.append(span.kind)
            self.lines.append(1)
            return
        self.lines[i] += 1


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


def _parse_both(lang: str, data: bytes, old_tree=None):
    """(primary spans, scanner spans for the primary's error regions, tree or None)."""
    if lang == "py":
        ts, tree = parse_tree(lang, data, old_tree)
        if ts is None:
            return py_scan_defs(data), None, None
        return ts, (py_scan_defs(data) if ts.errors else None), tree
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
    return ts, (scan_defs(data) if ts.errors else None), tree


class SymbolNamer:
    def __init__(
        self,
        read_blob: Callable[[str], bytes | None],
        read_many: Callable[[list[str]], dict[str, bytes | None]] | None = None,
    ):
        self.read_blob = read_blob
        self.read_many = read_many
        self._pending: dict[str, bytes | None] = {}
        self._cache: OrderedDict[str, tuple[FileDefs, FileDefs | None] | None] = OrderedDict()
        # path -> (blob, tree, contents) of the version parsed last: the next version of that
        # file met (one commit older) is parsed incrementally from it
        self._trees: dict[str, tuple[str, object, bytes]] = {}
        self.parsed = 0

    def _defs(
        self, lang: str, blob: str, path: str = "", base: tuple | None = None
    ) -> tuple[FileDefs, FileDefs | None] | None:
        """(tree-sitter defs, scanner defs where the parse has ERROR regions), or None when the
        blob cannot be read. `base`: (other blob, hunks, to_old) to parse incrementally from."""
        if blob in self._cache:
            self._cache.move_to_end(blob)
            return self._cache[blob]
        data = self._pending.pop(blob) if blob in self._pending else self.read_blob(blob)
        got: tuple[FileDefs, FileDefs | None] | None = None
        if data is not None:
            self.parsed += 1
            old_tree = None
            held = self._trees.pop(path, None)
            if base is not None and held is not None and held[0] == base[0]:
                old_tree = edit_tree(held[1], held[2], data, base[1], base[2])
            ts, scan, tree = _parse_both(lang, data, old_tree)
            got = (ts, scan)
            if tree is not None and path:
                self._trees[path] = (blob, tree, data)
                if len(self._trees) > CACHE_BLOBS // 8:
                    self._trees.pop(next(iter(self._trees)))
        self._cache[blob] = got
        if len(self._cache) > CACHE_BLOBS:
            self._cache.popitem(last=False)
        return got

    def prefetch(self, changes: list[tuple[str, str | None, str | None, list]]) -> None:
        """Read, in one round trip, every blob that `name` will need for these file changes."""
        if self.read_many is None:
            return
        want: list[str] = []
        for path, old_blob, new_blob, hunks in changes:
            if grammar_for(path) is None:
                continue
            if old_blob and any(h[1] for h in hunks) and old_blob not in self._cache:
                want.append(old_blob)
            if new_blob and any(h[3] for h in hunks) and new_blob not in self._cache:
                want.append(new_blob)
        if len(want) > 1:
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
        out = Named()
        need_old = any(on for _, on, _, _ in hunks)
        need_new = any(nn for _, _, _, nn in hunks)
        for side, blob, needed in (("new", new_blob, need_new), ("old", old_blob, need_old)):
            if not needed or not blob:
                continue
            base = (new_blob, hunks, True) if side == "old" and new_blob else None
            got = self._defs(lang, blob, path, base)
            if got is None:
                out.problem = f"blob {blob[:12]} ({side} {path}) is missing from the repository"
                continue
            ts, scan = got
            for os_, on, ns, nn in hunks:
                start, count = (ns, nn) if side == "new" else (os_, on)
                for line in range(start, start + count):
                    if scan is not None and ts.in_error(line):
                        sp, method = scan.owner(line), "scanner"
                    else:
                        sp, method = ts.owner(line), ts.method
                    if sp is not None:
                        out.add(sp, method)
        return out


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
