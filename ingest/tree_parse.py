"""One blob's definitions from its bytes: tree-sitter (incrementally from the tree of the
version of the same file parsed last, when the hunks that link the two are known), and the
scanners for what tree-sitter cannot read. Used by the namer in the mining process and by
its parse worker (ingest/parse_worker.py) alike, so both parse the same way.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from kbase.ingest.brace_scan import scan_defs
from kbase.ingest.definitions import (
    CLASS,
    FUNCTION,
    METHOD,
    FileDefs,
    Span,
    edit_tree,
    line_offsets,
    parse_tree,
)
from kbase.ingest.defs_cache import SCAN_PENDING

# trees of the last parsed version per file, for incremental parses: bounded by count and by
# the bytes of source they hold (a tree costs a few times its source)
HOLD_TREES = 4096
HOLD_BYTES = 96 << 20
_PY_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_]\w*)")


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


class HeldTrees:
    """Parses blobs, keeping per path the tree of the version parsed last: the next parse of
    that path edits it into a base for an incremental parse. What it returns depends on the
    order of the parses only, so a worker fed the same parses in the same order gives the
    same definitions."""

    def __init__(self) -> None:
        # path -> (blob, tree, contents, its line offsets or None) of the version parsed last
        self._trees: OrderedDict[str, tuple[str, object, bytes, object]] = OrderedDict()
        self._held_bytes = 0

    def _hold(self, path: str, blob: str, tree: object, data: bytes, offsets: object) -> None:
        old = self._trees.pop(path, None)
        if old is not None:
            self._held_bytes -= len(old[2])
        self._trees[path] = (blob, tree, data, offsets)
        self._held_bytes += len(data)
        while len(self._trees) > HOLD_TREES or self._held_bytes > HOLD_BYTES:
            _, (_, _, gone, _) = self._trees.popitem(last=False)
            self._held_bytes -= len(gone)

    def parse(
        self, lang: str, blob: str, path: str, base: tuple | None, data: bytes
    ) -> tuple[tuple[FileDefs, FileDefs | None], bool]:
        """((tree-sitter defs, scanner defs or SCAN_PENDING or None), parsed incrementally).
        `base`: (other blob, hunks, to_old) to parse incrementally from."""
        old_tree = offsets = None
        held = self._trees.get(path)
        incremental = base is not None and held is not None and held[0] == base[0]
        if incremental:
            assert base is not None and held is not None
            # each version's line offsets are found once: as the edit's destination here,
            # kept with its tree for the edit from it to the next older version
            src_offsets = held[3] if held[3] is not None else line_offsets(held[2])
            offsets = line_offsets(data)
            old_tree = edit_tree(held[1], held[2], data, base[1], base[2], (src_offsets, offsets))
        ts, scan, tree = _parse_both(lang, data, old_tree, lazy=True)
        if tree is not None and path:
            self._hold(path, blob, tree, data, offsets)
        return (ts, scan), incremental
