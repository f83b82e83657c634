"""Markdown documents with YAML front-matter: split, parse, and locate errors by line: the line
of the offending YAML key (`skills/x/SKILL.md:14: [verification.tiers] ...`).

`load_yaml` cannot crash a command (duplicate keys and impossible dates are refused with their
line; libyaml when present). PyYAML builds documents recursively: 5,000 nested `[` raise
RecursionError in the pure-Python loader and overflow the C stack (a segfault) in libyaml's
composer, so nesting is bounded first (a cheap upper bound from the text spares ordinary
front-matter the exact token scan). Aliases share nodes: 1 KB of anchors can stand for 9**9
values, which every walk of the data expands, so the node graph is sized as a tree before
anything walks it and refused past MAX_NODES."""

from __future__ import annotations

import functools
import re
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.schema import CodeBlock, Problem

MAX_DEPTH = 32  # real front-matter nests 4-5 levels; anything near this is an accident or an attack
MAX_NODES = 50_000  # values once aliases are expanded; real front-matter has a few hundred
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BRACKETS = re.compile(r"[\[\]{}]")
_LINE_PREFIX = re.compile(r"^[ \t?:-]*", re.M)
_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken)
_OPEN_FLOW = (yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class YamlProblem(ProblemsError):
    """YAML that is malformed, too deep or repeats a key; callers re-raise as their own error."""


def _depth_bound(text: str) -> int:
    """An upper bound of the nesting depth (quotes ignored, so it can only over-estimate)."""
    flow = deepest = 0
    for m in _BRACKETS.finditer(text):
        flow += 1 if m.group() in "[{" else -1
        deepest = max(deepest, flow)
    block = max((len(p) for p in _LINE_PREFIX.findall(text)), default=0)
    return deepest + block + 2


def too_deep_line(text: str) -> int | None:
    """0-based line where nesting first exceeds MAX_DEPTH, or None. The scanner is iterative."""
    if _depth_bound(text) <= MAX_DEPTH:
        return None
    depth = 0
    # The pure-Python scanner, whatever loader parses: libyaml's scanner reads a whole flow
    # collection ahead and (PyYAML >= 6.0.4) raises its own "exceeded maximum nesting depth"
    # at 1,000 levels before one deep token reaches this loop; this one yields tokens lazily.
    with suppress(yaml.YAMLError):  # the parse below reports the syntax error with its line
        for tok in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(tok, _OPEN) or isinstance(tok, _OPEN_FLOW):
                depth += 1
                if depth > MAX_DEPTH:
                    return int(tok.start_mark.line)
            elif isinstance(tok, _CLOSE):
                depth -= 1
    return None


def _children(n: Any) -> list[Any]:
    if isinstance(n, yaml.MappingNode):
        return [x for kv in n.value for x in kv]
    return list(n.value) if isinstance(n, yaml.SequenceNode) else []


def _too_many_nodes(root: Any) -> int | None:
    """0-based line of the node whose expanded size passes MAX_NODES (or that contains itself
    through an alias), else None. Iterative, each node sized once."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        n, done = stack.pop()
        key = id(n)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(k)] for k in _children(n))
            if sizes[key] > MAX_NODES:
                return int(n.start_mark.line)
        elif key in on_path:
            return int(n.start_mark.line)  # an alias inside its own anchor: infinite
        elif key not in sizes:
            on_path.add(key)
            stack.append((n, True))
            stack.extend((k, False) for k in _children(n) if id(k) not in sizes)
    return None


def _faults(loader: Any, root: Any, path: str, first_line: int) -> list[Problem]:
    """Every mapping key given twice (YAML would silently keep the last), both lines named; else
    the first timestamp-looking scalar that is no real date (it would raise while constructed)."""
    dups: list[Problem] = []
    bad: list[Problem] = []
    stack, visited = [root], set()
    while stack:
        n = stack.pop()
        if id(n) in visited:  # an alias: it was checked where its anchor is
            continue
        visited.add(id(n))
        if isinstance(n, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, _ in n.value:
                if isinstance(k, yaml.ScalarNode) and k.value != "<<":
                    line = k.start_mark.line + first_line
                    if k.value in seen:
                        why = f"key {k.value!r} is given twice (lines {seen[k.value]} and {line}); "
                        why += "YAML would silently keep the last one"
                        dups.append(_problem(path, line, "duplicate-key", why, str(k.value)))
                    else:
                        seen[k.value] = line
        elif isinstance(n, yaml.ScalarNode) and n.tag == _TIMESTAMP and not bad:
            try:
                loader.construct_yaml_timestamp(n)
            except (ValueError, OverflowError) as exc:
                why = f"{n.value!r} is not a valid date or time ({exc})"
                bad = [_problem(path, n.start_mark.line + first_line, "bad-date", why)]
        stack.extend(_children(n))
    return dups or bad


def load_yaml(text: str, path: str, first_line: int = 1) -> tuple[Any, Any]:
    """(data, node tree) of one YAML document; YamlProblem names the file and line of any fault.
    first_line: the file line of the text's first line (2 for front-matter after `---`)."""
    deep = too_deep_line(text)
    if deep is not None:
        why = f"YAML nests deeper than {MAX_DEPTH} levels here; flatten it"
        raise YamlProblem([_problem(path, deep + first_line, "too-deep", why)])
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        big = _too_many_nodes(node)
        if big is not None:
            why = f"YAML aliases expand to more than {MAX_NODES:,} values; write the values out"
            raise YamlProblem([_problem(path, big + first_line, "too-many-nodes", why)])
        faults = _faults(loader, node, path, first_line)
        if faults:
            raise YamlProblem(faults)
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + first_line if mark is not None else first_line
        problem = getattr(exc, "problem", None) or str(exc)
        why = f"malformed YAML: {problem}"
        raise YamlProblem([_problem(path, line, "malformed-yaml", why)]) from None
    finally:
        loader.dispose()
    return data, node


def _problem(path: str, line: int, code: str, message: str, field: str | None = None) -> Problem:
    return Problem(path=path, line=line, field=field, code=code, message=message)


class DocumentError(ProblemsError):
    """A document that does not parse or validate; `.problems` says where and why."""


@dataclass
class Section:
    title: str
    level: int
    line: int  # 1-based line of the heading in the file
    text: str


@dataclass
class Document:
    path: str
    meta: dict[str, Any]
    meta_node: Any  # yaml node tree, for line lookups
    body: str
    body_line: int  # 1-based file line where the body starts
    sections: list[Section] = field(default_factory=list)
    code_blocks: list[CodeBlock] = field(default_factory=list)
    title: str = ""

    def line_of(self, loc: tuple[Any, ...]) -> int:
        return node_line(self.meta_node, loc)


# Only block structure is read (headings, fences); inline parsing was 60% of lint time. Built on
# first parse: the YAML of cards and recipes (load_yaml) needs no markdown parser.
@functools.cache
def _md() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").disable("inline")


def split_front_matter(text: str, path: str) -> tuple[str, str, int]:
    """Return (yaml_text, body, body_start_line). The YAML starts on file line 2."""
    lines = text.split("\n")
    if lines[0].strip() != "---":
        raise _error(path, 1, "missing YAML front-matter: the file must start with '---'")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]), i + 2
    raise _error(path, 1, "unterminated front-matter: no closing '---' line")


def _error(path: str, line: int, message: str) -> DocumentError:
    return DocumentError([Problem(path=path, line=line, message=message)])


def node_line(node: Any, loc: tuple[Any, ...]) -> int:
    """1-based file line of the YAML node at `loc` (front-matter starts on line 2)."""
    best = node.start_mark.line if node is not None else 0
    cur = node
    for key in loc:
        if isinstance(cur, yaml.MappingNode):
            hit = next(
                ((k, v) for k, v in cur.value if getattr(k, "value", None) == str(key)), None
            )
            if hit is None:
                break
            best, cur = hit[0].start_mark.line, hit[1]
        elif isinstance(cur, yaml.SequenceNode) and isinstance(key, int) and key < len(cur.value):
            cur = cur.value[key]
            best = cur.start_mark.line
        else:
            break
    return best + 2


def validation_problems(
    exc: ValidationError, shown: str, node, first_line: int, unknown: str = "unknown key"
) -> list[Problem]:
    """Pydantic errors as Problems at the line of the offending YAML key (`unknown`: what an
    unknown key is told). `first_line` is the file line where the YAML starts: 1 for a recipe, 2
    for front-matter."""
    told = {"extra_forbidden": unknown, "missing": "required key is missing"}
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        # node_line counts from front-matter that starts on line 2
        line = max(1, node_line(node, loc) - 2 + first_line) if node is not None else first_line
        msg, field = told.get(err["type"], err["msg"]), ".".join(map(str, loc)) or None
        out.append(Problem(path=shown, line=line, field=field, message=msg))
    return out


def parse_yaml(yaml_text: str, path: str) -> tuple[dict[str, Any], Any]:
    """The front-matter mapping and its node tree (for line numbers); DocumentError otherwise."""
    try:
        data, node = load_yaml(yaml_text, path, first_line=2)
    except YamlProblem as exc:
        raise DocumentError(exc.problems) from None
    if data is None:
        raise _error(path, 1, "front-matter is empty")
    if not isinstance(data, dict):
        raise _error(path, 2, "front-matter must be a YAML mapping")
    return data, node


def parse_body(body: str, body_line: int) -> tuple[list[Section], list[CodeBlock], str]:
    """Sections (by heading) and fenced code blocks, with file line numbers."""
    tokens = _md().parse(body)
    lines = body.split("\n")
    headings: list[tuple[int, int, str]] = []  # (body_line0, level, title)
    blocks: list[CodeBlock] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            headings.append((tok.map[0], int(tok.tag[1]), title))
        elif tok.type == "fence" and tok.map:
            info = tok.info.strip()
            lang = info.split()[0] if info else ""
            line = body_line + tok.map[0]
            blocks.append(CodeBlock(info=info, lang=lang, code=tok.content, line=line))
    doc_title = next((t for _, lvl, t in headings if lvl == 1), "")
    sections: list[Section] = []
    bounds = headings + [(len(lines), 0, "")]
    intro = "\n".join(lines[: bounds[0][0]]).strip()  # what comes before the first heading
    if intro:
        sections.append(Section(title="", level=0, line=body_line, text=intro))
    for (start, level, title), (end, _, _) in zip(bounds, bounds[1:], strict=False):
        text = "\n".join(lines[start + 1 : end]).strip()
        sections.append(Section(title=title, level=level, line=body_line + start, text=text))
    return sections, blocks, doc_title


def parse_document(text: str, path: str) -> Document:
    yaml_text, body, body_line = split_front_matter(text, path)
    meta, node = parse_yaml(yaml_text, path)
    sections, blocks, title = parse_body(body, body_line)
    return Document(path, meta, node, body, body_line, sections, blocks, title)
