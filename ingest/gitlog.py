"""Stream the diffs of chosen commits out of one `git log -p -U0` and parse them into commit facts.
One process for the whole range keeps mining close to the cost of git itself: no per-commit
object lookups, no Python-side diffing; line counts come from the hunk headers."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kbase.ingest.change_symbols import SymbolNamer

_HUNK = re.compile(rb"^@@@* -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
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
    named_by: list[str] = field(default_factory=list)  # per symbol: tree-sitter|scanner
    kinds: list[str] = field(default_factory=list)  # per symbol: kernel|function|method|class|macro
    weights: list[int] = field(default_factory=list)  # per symbol: changed lines inside it
    old_blob: str | None = None
    new_blob: str | None = None
    hunks: list[tuple[int, int, int, int]] = field(default_factory=list)
    excerpts: list[tuple[int, int, list[str]]] = field(default_factory=list)  # (old, new, lines)
    problem: str | None = None


@dataclass
class CommitFacts:
    sha: str
    parents: list[str]
    date: str
    subject: str
    body: str
    files: list[FileFacts] = field(default_factory=list)


OnCommit = Callable[[CommitFacts], None]  # where the facts of each commit go


def unquote_path(s: str) -> str:
    """Undo git's C-style quoting of unusual paths ("a\\tb", octal UTF-8 bytes)."""
    if not (len(s) >= 2 and s[0] == '"' and s[-1] == '"'):
        return s
    raw = s[1:-1].encode("utf-8", "surrogateescape")
    return codecs.escape_decode(raw)[0].decode("utf-8", "replace")


def _strip_prefix(s: str, prefix: str) -> str:
    return unquote_path(s).removeprefix(prefix)


def _paths_from_diff_header(rest: str) -> tuple[str, str]:
    """`a/X b/Y` from a `diff --git` line; exact when X == Y or when quoted, best effort otherwise
    (rename/---/+++ lines that follow override it)."""
    if rest.startswith('"'):
        end = rest.find('" ', 1)
        while end > 0 and rest[end - 1] == "\\":
            end = rest.find('" ', end + 1)
        if end > 0:
            return _strip_prefix(rest[: end + 1], "a/"), _strip_prefix(rest[end + 2 :], "b/")
    half = (len(rest) - 5) // 2  # `a/X b/X`: X is half of what is not `a/`, ` b/`
    a, b = rest[2 : 2 + half], rest[5 + half :]
    if len(rest) % 2 and rest.startswith("a/") and rest[2 + half : 5 + half] == " b/" and a == b:
        return a, b
    i = rest.find(" b/")
    return _strip_prefix(rest[:i], "a/"), _strip_prefix(rest[i + 1 :], "b/")


def log_command() -> list[str]:
    """`git log` over the commits given on stdin, in that order, each against its first parent.
    No attributes file of the user's (a diff driver, `-diff`) changes what it prints."""
    config = "core.quotepath=false core.attributesFile=/dev/null diff.noprefix=false"
    return [
        *(x for c in (*config.split(), "diff.mnemonicPrefix=false") for x in ("-c", c)),
        *"log --no-walk=unsorted --full-index --stdin --diff-merges=first-parent -M -p -U0".split(),
        *"--no-color --no-ext-diff --no-textconv --src-prefix=a/ --dst-prefix=b/".split(),
        f"--format={LOG_FORMAT}",
    ]


def parse_log(
    stream, on_commit: OnCommit, namer: SymbolNamer, last_ok: Callable[[], bool] | None = None
) -> int:
    """Feed each parsed commit to `on_commit` as soon as its diff is complete; returns the count.
    `last_ok` is asked before the final commit is handed on (git may have died inside it)."""
    p = _Parser(on_commit, namer)
    rem = 0  # lines of the current hunk still to come
    for raw in stream:
        if rem:  # the lines of a hunk: every line of the history's diffs passes here
            c = raw[0]
            if c == 43 or c == 45:  # '+', '-'
                rem -= 1
                ex = p.excerpt
                if ex is not None and len(ex) < DIFF_KEEP:
                    ex.append(raw.rstrip(b"\r\n").decode("utf-8", "replace")[:160])
                continue
            if c == 92:  # '\ No newline at end of file'
                continue
            rem = 0
        if p.head_buf:
            p.head_buf.append(raw)
            if _HEADER_END in raw:
                p.commit = _commit_header(b"".join(p.head_buf))
                p.head_buf = []
        elif raw[:1] == b"@":
            rem = p.hunk(raw)
        elif raw[:1] == b"\x1e":
            p.start_commit(raw)
        elif raw.startswith(b"diff --git "):
            p.start_file(raw)
        elif p.in_header and p.cur is not None:
            p.header_line(p.cur, raw.rstrip(b"\r\n").decode("utf-8", "surrogateescape"))
    if last_ok is None or last_ok():
        p.finish()
    namer.drain()
    return p.count


class _Parser:
    """Where a `git log -p` stream is: the commit and the file being read."""

    def __init__(self, on_commit: OnCommit, namer: SymbolNamer):
        self.on_commit, self.namer = on_commit, namer
        self.commit: CommitFacts | None = None
        self.cur: FileFacts | None = None
        self.in_header = False
        self.head_buf: list[bytes] = []
        self.minus_path: str | None = None
        self.excerpt: list[str] | None = None
        self.kept = 0
        self.count = 0

    def finish(self) -> None:
        """The current commit is complete: the namer names its symbols, then hands it on."""
        if self.commit is not None:
            self.namer.name_commit(self.commit, self.on_commit)
            self.commit = None
            self.count += 1

    def start_commit(self, raw: bytes) -> None:
        self.finish()  # `commit` is None from here
        self.cur, self.in_header, self.excerpt, self.kept = None, False, None, 0
        if _HEADER_END in raw:
            self.commit = _commit_header(raw)
        else:
            self.head_buf = [raw]

    def start_file(self, raw: bytes) -> None:
        self.excerpt = None
        a, b = _paths_from_diff_header(raw[11:].rstrip(b"\r\n").decode("utf-8", "surrogateescape"))
        self.cur = FileFacts(path=b, old_path=a if a != b else None)
        if self.commit is not None:
            self.commit.files.append(self.cur)
        self.in_header, self.minus_path = True, None

    def hunk(self, raw: bytes) -> int:
        """Read a hunk header; returns how many lines the hunk holds."""
        m = _HUNK.match(raw.rstrip(b"\r\n"))
        cur = self.cur
        if not m or cur is None:
            return 0
        old_s, old_n, new_s, new_n = map(int, (m[1], m[2] or 1, m[3], m[4] or 1))
        cur.hunks.append((old_s, old_n, new_s, new_n))
        if self.kept < HUNKS_KEEP and len(cur.excerpts) < HUNKS_PER_FILE:
            self.kept += 1
            self.excerpt = []
            cur.excerpts.append((old_s, new_s, self.excerpt))
        else:
            self.excerpt = None
        if cur.added is not None and cur.deleted is not None:
            cur.added += new_n
            cur.deleted += old_n
        self.in_header = False
        return old_n + new_n

    def header_line(self, cur: FileFacts, text: str) -> None:
        """A line between `diff --git` and the first hunk: renames, blob ids, binary."""
        if text.startswith("rename from "):
            cur.old_path = unquote_path(text[12:])
        elif text.startswith("index "):
            if im := _INDEX.match(text):
                cur.old_blob, cur.new_blob = im.group(1), im.group(2)
        elif text.startswith("rename to "):
            cur.path = unquote_path(text[10:])
        elif text.startswith("--- ") and text[4:] != "/dev/null":
            self.minus_path = _strip_prefix(text[4:], "a/")
        elif text.startswith("+++ ") and text[4:] != "/dev/null":
            cur.path = _strip_prefix(text[4:], "b/")
            if self.minus_path is not None and self.minus_path != cur.path:
                cur.old_path = self.minus_path
        elif text.startswith("Binary files ") or text.startswith("GIT binary patch"):
            cur.added = cur.deleted = None


def _commit_header(blob: bytes) -> CommitFacts:
    text = blob.decode("utf-8", "replace").lstrip("\x1e").split("\x1d", 1)[0]
    sha, parents, date, subject, body = (text.split("\x1f", 4) + ["", "", "", ""])[:5]
    return CommitFacts(sha.strip(), parents.split(), date.strip(), subject.strip(), body.strip())
