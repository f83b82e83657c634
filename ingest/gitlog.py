"""Stream the diffs of chosen commits out of one `git log -p -U0` and parse them into commit facts.

One process for the whole range keeps mining close to the cost of git itself: no
per-commit object lookups, no Python-side diffing. Line counts come from the hunk
headers (`@@ -a,b +c,d @@`), symbols from the hunk header context and from added
lines that define something.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kbase.ingest.change_symbols import SymbolNamer
from kbase.ingest.definitions import grammar_for
from kbase.ingest.symbols import added_definition, language_kind, symbol_of

MAX_SYMBOLS = 16
_HUNK = re.compile(rb"^@@@* -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@@* ?(.*)$")
_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")
DIFF_KEEP = 12  # diff lines kept per hunk for the card's key-diff excerpt
# Hunks kept for it per file, and per commit: per file, so that the kernel file a card should
# show is not crowded out by the benchmarks and CI files git lists before it (issue #27: 143 of
# 1,147 kernel cards showed one); key_diff ranks the files afterwards.
HUNKS_PER_FILE = 3
HUNKS_KEEP = 600
_HEADER_END = b"\x1d"
# %b is the body: merge commits keep the PR title there
LOG_FORMAT = "%x1e%H%x1f%P%x1f%cI%x1f%s%x1f%b%x1d"


@dataclass
class FileFacts:
    path: str
    old_path: str | None = None
    added: int | None = 0
    deleted: int | None = 0
    symbols: list[str] = field(default_factory=list)
    named_by: list[str] = field(default_factory=list)  # per symbol: tree-sitter|scanner|hunk-header
    kinds: list[str] = field(default_factory=list)  # per symbol: kernel|function|method|class|macro
    weights: list[int] = field(default_factory=list)  # per symbol: changed lines inside it
    old_blob: str | None = None
    new_blob: str | None = None
    hunks: list[tuple[int, int, int, int]] = field(default_factory=list)
    excerpts: list[tuple[int, int, list[str]]] = field(default_factory=list)  # (old, new, lines)
    problem: str | None = None

    def add_symbol(self, name: str | None) -> None:
        if name and name not in self.symbols and len(self.symbols) < MAX_SYMBOLS:
            self.symbols.append(name)
            self.named_by.append("hunk-header")
            self.kinds.append("function")
            self.weights.append(1)


@dataclass
class CommitFacts:
    sha: str
    parents: list[str]
    date: str
    subject: str
    body: str
    files: list[FileFacts] = field(default_factory=list)


def unquote_path(s: str) -> str:
    """Undo git's C-style quoting of unusual paths ("a\\tb", octal UTF-8 bytes)."""
    if not (len(s) >= 2 and s[0] == '"' and s[-1] == '"'):
        return s
    raw = s[1:-1].encode("utf-8", "surrogateescape")
    return codecs.escape_decode(raw)[0].decode("utf-8", "replace")


def _strip_prefix(s: str, prefix: str) -> str:
    s = unquote_path(s)
    return s[len(prefix) :] if s.startswith(prefix) else s


def _paths_from_diff_header(rest: str) -> tuple[str, str]:
    """`a/X b/Y` from a `diff --git` line; exact when X == Y or when quoted, best effort otherwise
    (rename/---/+++ lines that follow override it)."""
    if rest.startswith('"'):
        end = rest.find('" ', 1)
        while end > 0 and rest[end - 1] == "\\":
            end = rest.find('" ', end + 1)
        if end > 0:
            return _strip_prefix(rest[: end + 1], "a/"), _strip_prefix(rest[end + 2 :], "b/")
    n = len(rest)
    if (n - 5) % 2 == 0:
        half = (n - 5) // 2
        a, b = rest[2 : 2 + half], rest[5 + half :]
        if rest.startswith("a/") and rest[2 + half : 5 + half] == " b/" and a == b:
            return a, b
    i = rest.find(" b/")
    return _strip_prefix(rest[:i], "a/"), _strip_prefix(rest[i + 1 :], "b/")


def log_command(attributes_file: str) -> list[str]:
    """`git log` over the commits given on stdin, in that order, each against its first parent."""
    return [
        "-c",
        "core.quotepath=false",
        "-c",
        f"core.attributesFile={attributes_file}",
        "-c",
        "diff.noprefix=false",
        "-c",
        "diff.mnemonicPrefix=false",
        "log",
        "--no-walk=unsorted",
        "--full-index",
        "--stdin",
        "--diff-merges=first-parent",
        "-M",
        "-p",
        "-U0",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        f"--format={LOG_FORMAT}",
    ]


def parse_log(
    stream,
    on_commit: Callable[[CommitFacts], None],
    namer: SymbolNamer | None = None,
    last_ok: Callable[[], bool] | None = None,
) -> int:
    """Feed each parsed commit to `on_commit` as soon as its diff is complete; returns the count.
    With a `namer`, files in a language with a grammar get their symbols from parsed code.
    `last_ok` is asked before the final commit is handed on (git may have died inside it)."""
    commit: CommitFacts | None = None
    cur: FileFacts | None = None
    kind: str | None = None
    in_header = False
    head_buf: list[bytes] = []
    rem = 0
    count = 0
    minus_path: str | None = None

    excerpt: list[str] | None = None
    kept = 0

    def finish() -> None:
        nonlocal count
        if commit is not None:
            if namer is not None:
                _name_symbols(commit, namer)
            on_commit(commit)
            count += 1

    for raw in stream:
        if rem:
            c = raw[0]
            if c == 43 or c == 45:
                if excerpt is not None and len(excerpt) < DIFF_KEEP:
                    excerpt.append(raw.rstrip(b"\r\n").decode("utf-8", "replace")[:160])
            if c == 43:  # '+'
                rem -= 1
                if kind is not None and cur is not None:
                    line = raw[1:].rstrip(b"\r\n")
                    # cheap byte tests first: this runs on every added line in the history
                    if kind == "py":
                        if b"def " in line or b"class " in line:
                            cur.add_symbol(added_definition(kind, line.decode("utf-8", "replace")))
                    elif line[:1] not in (
                        b" ",
                        b"\t",
                        b"",
                        b"/",
                        b"*",
                        b"}",
                        b"{",
                        b")",
                        b"#",
                    ) and (b"(" in line or line.startswith((b"struct ", b"class ", b"template"))):
                        cur.add_symbol(added_definition(kind, line.decode("utf-8", "replace")))
                continue
            if c == 45:  # '-'
                rem -= 1
                continue
            if c == 92:  # '\ No newline at end of file'
                continue
            rem = 0
        if head_buf:
            head_buf.append(raw)
            if _HEADER_END in raw:
                commit = _commit_header(b"".join(head_buf))
                head_buf = []
            continue
        c = raw[:1]
        if c == b"@":
            m = _HUNK.match(raw.rstrip(b"\r\n"))
            if m and cur is not None:
                old_n = int(m.group(2)) if m.group(2) is not None else 1
                new_n = int(m.group(4)) if m.group(4) is not None else 1
                cur.hunks.append((int(m.group(1)), old_n, int(m.group(3)), new_n))
                if kept < HUNKS_KEEP and len(cur.excerpts) < HUNKS_PER_FILE:
                    kept += 1
                    excerpt = []
                    cur.excerpts.append((int(m.group(1)), int(m.group(3)), excerpt))
                else:
                    excerpt = None
                if cur.added is not None and cur.deleted is not None:
                    cur.added += new_n
                    cur.deleted += old_n
                rem = old_n + new_n
                in_header = False
                ctx = m.group(5)
                if ctx and kind is not None:
                    cur.add_symbol(symbol_of(cur.path, ctx.decode("utf-8", "replace")))
            continue
        if c == b"\x1e":
            finish()
            commit, cur, kind, in_header, excerpt, kept = None, None, None, False, None, 0
            if _HEADER_END in raw:
                commit = _commit_header(raw)
            else:
                head_buf = [raw]
            continue
        if raw.startswith(b"diff --git "):
            excerpt = None
            a, b = _paths_from_diff_header(
                raw[11:].rstrip(b"\r\n").decode("utf-8", "surrogateescape")
            )
            cur = FileFacts(path=b, old_path=a if a != b else None)
            if commit is not None:
                commit.files.append(cur)
            kind = _hunk_kind(cur.path, namer)
            in_header = True
            minus_path = None
            continue
        if in_header and cur is not None:
            text = raw.rstrip(b"\r\n").decode("utf-8", "surrogateescape")
            if text.startswith("rename from "):
                cur.old_path = unquote_path(text[12:])
            elif text.startswith("index "):
                im = _INDEX.match(text)
                if im:
                    cur.old_blob, cur.new_blob = im.group(1), im.group(2)
            elif text.startswith("rename to "):
                cur.path = unquote_path(text[10:])
                kind = _hunk_kind(cur.path, namer)
            elif text.startswith("--- ") and text[4:] != "/dev/null":
                minus_path = _strip_prefix(text[4:], "a/")
            elif text.startswith("+++ ") and text[4:] != "/dev/null":
                cur.path = _strip_prefix(text[4:], "b/")
                kind = _hunk_kind(cur.path, namer)
                if minus_path is not None and minus_path != cur.path:
                    cur.old_path = minus_path
            elif text.startswith("Binary files ") or text.startswith("GIT binary patch"):
                cur.added = cur.deleted = None
    if last_ok is None or last_ok():
        finish()
    return count


def _name_symbols(commit: CommitFacts, namer: SymbolNamer) -> None:
    """Name every file of the commit in a language with a grammar from its parsed code."""
    for f in commit.files:
        named = namer.name(f.path, f.old_blob, f.new_blob, f.hunks) if f.hunks else None
        if named is not None:
            f.symbols, f.named_by, f.kinds = named.symbols, named.named_by, named.kinds
            f.weights, f.problem = named.lines, named.problem


def _hunk_kind(path: str, namer: SymbolNamer | None) -> str | None:
    """The hunk-header language of `path`, only where no grammar will name its symbols."""
    if namer is not None and grammar_for(path) is not None:
        return None
    return language_kind(path)


def _commit_header(blob: bytes) -> CommitFacts:
    text = blob.decode("utf-8", "replace").lstrip("\x1e")
    text = text.split("\x1d", 1)[0]
    sha, parents, date, subject, body = (text.split("\x1f", 4) + ["", "", "", ""])[:5]
    return CommitFacts(
        sha=sha.strip(),
        parents=parents.split(),
        date=date.strip(),
        subject=subject.strip(),
        body=body.strip(),
    )
