"""Definition spans of one source file from its tree-sitter parse (docs/pr-archive.md "Symbols
from parsed code"). Only declaration levels are visited, never expressions: a large header costs
one parse and a few thousand node visits. ERROR regions come back as line ranges (`errors`)."""

from __future__ import annotations

import bisect
import importlib
import operator
from array import array
from dataclasses import dataclass, field
from functools import cache
from itertools import accumulate, count

KERNEL, FUNCTION, METHOD, CLASS, MACRO = "kernel", "function", "method", "class", "macro"
Hunk = tuple[int, int, int, int]  # -U0 (old_start, old_count, new_start, new_count)


@dataclass(frozen=True)
class Span:
    start: int  # 1-based, inclusive
    end: int
    name: str
    kind: str


@dataclass
class FileDefs:
    """Every definition span of one blob, plus the line ranges where the parse failed."""

    spans: list[Span] = field(default_factory=list)
    errors: list[tuple[int, int]] = field(default_factory=list)
    method: str = "tree-sitter"
    _owner: list[Span | None] | None = field(default=None, repr=False)

    def finish(self) -> FileDefs:
        self.spans.sort(key=lambda s: (s.start, -s.end))
        self.errors.sort()
        return self

    def table(self) -> list[Span | None]:
        """Per line (index = line number) the innermost span holding it."""
        if self._owner is None:
            n = max((sp.end for sp in self.spans), default=0) + 1
            table: list[Span | None] = [None] * (n + 1)
            for sp in self.spans:  # sorted by start, outer before inner
                table[sp.start : sp.end + 1] = [sp] * (sp.end - sp.start + 1)
            self._owner = table
        return self._owner

    def owner(self, line: int) -> Span | None:
        """The innermost span that holds `line` (spans nest or are disjoint)."""
        table = self.table()
        return table[line] if 0 <= line < len(table) else None

    def in_error(self, line: int) -> bool:
        i = bisect.bisect_right(self.errors, (line, 1 << 30))
        return i > 0 and self.errors[i - 1][1] >= line


@cache
def _parser(lang: str):
    from tree_sitter import Language, Parser

    mod = importlib.import_module("tree_sitter_python" if lang == "py" else "tree_sitter_cuda")
    return Parser(Language(mod.language()))


# the files CUDA's grammar reads: OpenCL C (.cl) and Metal (.metal) are C and C++ with qualifiers
# the grammar does not know, so their kernels sit in ERROR regions the brace scanner reads
C_FAMILY = tuple(".cu .cuh .c .cc .cpp .cxx .h .hh .hpp .hxx .inl .inc .hip .cl .metal".split())


def grammar_for(path: str) -> str | None:
    """`py`, `cuda` or None (no symbols). CUDA's grammar reads the whole C family: a superset of
    C++, and CUDA qualifiers appear in .h files too."""
    p = path.lower()
    if p.endswith((".py", ".pyi")):
        return "py"
    return "cuda" if p.endswith(C_FAMILY) else None


# Error recovery on broken code can take a hundred times longer than a sound parse, so a parse
# past this budget is abandoned (the brace scanner names a C-family file's symbols, a Python
# file has none). The budget counts tree-sitter's progress callbacks (one per 100 parse
# operations), not seconds: a time budget gave different cards on a busy machine than on a
# quiet one. Sound C++/CUDA and Python take ~6 callbacks per KB (~54 us each here), dense
# Python more: 17-20 in sympy's and onnx's tests, the most of 982 site-packages files over 2 KB.
PARSE_BUDGET_CALLS = 120
PARSE_BUDGET_CALLS_PER_KB = 24


def parse_tree(lang: str, src: bytes, old_tree=None):
    """(definition spans from tree-sitter or None when the parse ran past its budget, the tree or
    None). `old_tree`: the tree of another version of the file, already edited to this one's
    coordinates (tree-sitter then re-parses only what changed)."""
    budget = PARSE_BUDGET_CALLS + PARSE_BUDGET_CALLS_PER_KB * len(src) // 1024
    parser = _parser(lang)
    read = lambda off, _pt: src[off : off + 65536]  # noqa: E731
    ticks = iter(range(budget))  # the parse is cancelled at the first callback past them
    stop = lambda *_: next(ticks, None) is None  # noqa: E731
    args = (read,) if old_tree is None else (read, old_tree)  # parse() takes no None tree
    try:
        tree = parser.parse(*args, progress_callback=stop)
    except ValueError:  # cancelled by the progress callback
        parser.reset()
        return None, None
    out = FileDefs()
    (_py_block if lang == "py" else _c_block)(tree.root_node, (), out, src)
    return out.finish(), tree


def line_offsets(src: bytes) -> array[int]:
    """Byte offset of the start of every line, then the length when the text does not end in
    a newline. An array, not a list: held trees' offsets live long, and the garbage collector
    walks every item of a list (a mine of the lmdeploy replay: 0.60 s -> 0.52 s of GC)."""
    out = array("q", [0])
    out.extend(map(operator.add, accumulate(map(len, src.split(b"\n")[:-1])), count(1)))
    if out[-1] != len(src):
        out.append(len(src))
    return out


def edit_tree(tree, a: array[int], b: array[int], hunks: list[Hunk]):
    """Edit `tree` (parsed from the new side of `hunks`, whose `line_offsets` are `a`) so that
    it describes the old side (`b`)."""

    def at(starts, line: int) -> int:
        return int(starts[min(max(line, 0), len(starts) - 1)])

    for d_start, d_n, s_start, s_n in reversed(hunks):  # bottom-up: offsets above stay valid
        s0 = s_start - 1 if s_n else s_start  # a count of 0 means "after line start"
        d0 = d_start - 1 if d_n else d_start
        start = at(a, s0)
        tree.edit(
            start_byte=start,
            old_end_byte=at(a, s0 + s_n),
            new_end_byte=start + (at(b, d0 + d_n) - at(b, d0)),
            start_point=(s0, 0),
            old_end_point=(s0 + s_n, 0),
            new_end_point=(s0 + d_n, 0),
        )
    return tree


def _line_span(node) -> tuple[int, int]:
    end_row, end_col = node.end_point
    # a node ending at column 0 of a line ends on the line before
    end = end_row if end_col == 0 and end_row > node.start_point[0] else end_row + 1
    return node.start_point[0] + 1, end


def _text(node, src: bytes) -> str:
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


# Python: the blocks besides a definition's body that may hold definitions
_PY_BLOCKS = frozenset("if_statement try_statement with_statement else_clause block".split())


def _py_block(node, scope: tuple[str, ...], out: FileDefs, src: bytes) -> None:
    for child in node.children:
        t, target = child.type, child
        if t == "decorated_definition":
            if (target := child.child_by_field_name("definition")) is None:
                continue
            t = target.type
        if t not in ("function_definition", "class_definition"):
            if t in _PY_BLOCKS and _may_define(child, src):
                _py_block(child, scope, out, src)  # definitions under `if TYPE_CHECKING:` etc.
            continue
        if (name_node := target.child_by_field_name("name")) is None:
            continue
        name = ".".join((*scope, _text(name_node, src)))
        kind = CLASS if t == "class_definition" else (METHOD if scope else FUNCTION)
        if kind != CLASS and _is_triton_kernel(child, src):
            kind = KERNEL
        out.spans.append(Span(*_line_span(child), name, kind))
        body = target.child_by_field_name("body")
        if body is not None and _may_define(body, src):
            _py_block(body, (*scope, _text(name_node, src)), out, src)


def _may_define(node, src: bytes) -> bool:
    """Whether a block could hold a nested definition: one needs the word `def` or `class`
    (a byte search, where walking a long function body statement by statement is not)."""
    a, b = node.start_byte, node.end_byte
    return src.find(b"def", a, b) >= 0 or src.find(b"class", a, b) >= 0


def _is_triton_kernel(node, src: bytes) -> bool:
    return node.type == "decorated_definition" and any(
        c.type == "decorator" and "jit" in _text(c, src) and "triton" in _text(c, src)
        for c in node.children
    )


# C, C++, CUDA: the nodes whose children are declarations
_C_CONTAINERS = frozenset(
    "translation_unit declaration_list preproc_if preproc_ifdef preproc_else preproc_elif "
    "preproc_elifdef linkage_specification".split()
)
_C_CLASSES = frozenset(("class_specifier", "struct_specifier", "union_specifier"))
_C_NAMES = frozenset(  # the declarator nodes that are a function's name
    "identifier field_identifier qualified_identifier destructor_name operator_name "
    "template_function".split()
)


def _c_block(node, scope: tuple[str, ...], out: FileDefs, src: bytes) -> None:
    for child in node.children:
        _c_item(child, child, scope, out, src)


def _c_item(child, outer, scope: tuple[str, ...], out: FileDefs, src: bytes) -> None:
    t = child.type
    if t == "ERROR":
        out.errors.append(_line_span(child))
    elif t in _C_CONTAINERS:
        _c_block(child, scope, out, src)
    elif t == "namespace_definition":
        if (body := child.child_by_field_name("body")) is not None:
            _c_block(body, scope, out, src)
    elif t == "template_declaration":
        for c in child.children:
            if c.type in ("function_definition", "declaration") or c.type in _C_CLASSES:
                _c_item(c, outer, scope, out, src)
    elif t in ("preproc_function_def", "preproc_def"):
        if (name := child.child_by_field_name("name")) is not None:
            out.spans.append(Span(*_line_span(child), _text(name, src), MACRO))
    elif t in ("declaration", "field_declaration", "type_definition") and child.children:
        for c in child.children:  # `struct X {...} x;`, `typedef struct {...} Y;`
            if c.type in _C_CLASSES:
                _c_item(c, outer if t != "type_definition" else c, scope, out, src)
    elif t in _C_CLASSES or t == "function_definition":
        if child.has_error:
            # a definition that holds a parse error (braces split by `#if`, macros in odd
            # places) may have swallowed its neighbours: its lines go to the scanner
            out.errors.append(_line_span(outer))
        if t in _C_CLASSES:
            name = child.child_by_field_name("name")
            body = child.child_by_field_name("body")
            if name is None or body is None:
                return
            cname = _text(name, src)
            out.spans.append(Span(*_line_span(outer), "::".join((*scope, cname)), CLASS))
            for c in body.children:
                _c_item(c, c, (*scope, cname), out, src)
        elif not child.has_error and (name := _declarator_name(child, src)):
            body = child.child_by_field_name("body")
            head = src[child.start_byte : body.start_byte if body is not None else child.end_byte]
            span = Span(*_line_span(outer), *c_function(scope, name, b"__global__" in head))
            out.spans.append(span)


def c_function(scope: tuple[str, ...] | list[str], name: str, is_global: bool) -> tuple[str, str]:
    """(qualified name, kind) of the C-family function `name` defined in `scope` (its classes)."""
    kind = KERNEL if is_global else METHOD if scope or "::" in name else FUNCTION
    return ("::".join((*scope, name)) if scope and "::" not in name else name), kind


def _declarator_name(decl, src: bytes) -> str | None:
    """The name inside a function definition's (possibly pointer/reference) declarator."""
    for _ in range(9):  # the definition, then up to 8 declarators
        if decl is None:
            return None
        inner = decl.child_by_field_name("declarator")
        if decl.type == "function_declarator" and inner is not None and inner.type in _C_NAMES:
            text = _text(inner, src)
            if inner.type == "template_function":
                text = text.split("<", 1)[0]
            return " ".join(text.split())
        decl = inner
    return None
