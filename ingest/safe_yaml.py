"""YAML that cannot crash a command: depth-limited, alias expansion bounded, duplicate keys and
impossible dates refused with their line, libyaml when present.

PyYAML builds documents recursively: 5,000 nested `[` raise RecursionError in the pure-Python
loader and overflow the C stack (a segfault) in libyaml's composer, so nesting is bounded first
(a cheap upper bound from the text spares ordinary front-matter the exact token scan). Aliases
share nodes: 1 KB of anchors can stand for 9**9 values, which every walk of the data expands, so
the node graph is sized as a tree before anything walks it and refused past MAX_NODES."""

from __future__ import annotations

import re
from contextlib import suppress
from typing import Any

import yaml

from kbase.errors import ProblemsError
from kbase.schema import Problem

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
