"""Markdown documents with YAML front-matter: split, parse, and locate errors by line: the line
of the offending YAML key (`skills/x/SKILL.md:14: [verification.tiers] ...`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from kbase.ingest.safe_yaml import YamlProblem, load_yaml
from markdown_it import MarkdownIt
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.schema import CodeBlock, Problem


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


# Only block structure is read (headings, fences); inline parsing was 60% of lint time.
_md = MarkdownIt("commonmark").disable("inline")


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
    tokens = _md.parse(body)
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
            blocks.append(
                CodeBlock(info=info, lang=lang, code=tok.content, line=body_line + tok.map[0])
            )
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
