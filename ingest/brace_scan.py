"""A brace-matching scanner for C, C++ and CUDA: definition spans where tree-sitter gave up
(docs/pr-archive.md "Symbols from parsed code"). The text between the previous `;`, `{` or `}`
and each `{` is read as that block's signature: a namespace, a class, a function or a block."""

from __future__ import annotations

import bisect
import operator
import re
from functools import lru_cache, partial
from itertools import accumulate, count

from kbase.ingest.definitions import CLASS, FUNCTION, MACRO, FileDefs, Span, c_function

_TOKEN = re.compile(
    r"//[^\n]*"
    r"|/\*.*?(?:\*/|\Z)"
    r'|R"([^(\s]{0,16})\(.*?\)\1"'
    r'|"(?:\\.|[^"\\\n])*"'
    r"|'(?:\\.|[^'\\\n])*'"
    r"|^[ \t]*#(?:\\\r?\n|[^\n])*"
    r"|[{};]",
    re.S | re.M,
)
_NOISE = re.compile(
    r'//[^\n]*|/\*.*?\*/|^[ \t]*#(?:\\\r?\n|[^\n])*|"(?:\\.|[^"\\\n])*"', re.S | re.M
)
_FIRST = re.compile(r"\S")
_NAMESPACE = re.compile(r"\bnamespace\b[\w:\s]*$")
_DEFINE = re.compile(r"[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)")
_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*([a-z]+)")
_ACCESS = re.compile(r"^\s*(?:public|private|protected)\s*:\s*")
_TEMPLATE_HEAD = re.compile(r"^\s*template\s*")
_CLASS_HEAD = re.compile(
    r"^(?:typedef\s+)?(?:class|struct|union)\s+"
    r"(?:(?:__align__|alignas|__declspec|__attribute__)\s*\(+[^)]*\)+\s*|\[\[[^\]]*\]\]\s*)*"
    r"([A-Za-z_]\w*)"
)
# attribute-like wrappers whose parentheses are not a parameter list; where none of these words
# is in a signature (the common case) _ATTR_CALL is not run over it
_ATTR_WORDS = "__launch_bounds__ __attribute__ alignas __align__ __declspec noexcept throw".split()
_ATTR_WORDS += ["decltype", "__cluster_dims__", "requires"]
_ATTR_CALL = re.compile(rf"\b(?:{'|'.join(_ATTR_WORDS)})\s*\(")
_NAME_BEFORE = re.compile(
    r"((?:[A-Za-z_]\w*\s*(?:<[^<>;{}]*(?:<[^<>;{}]*>[^<>;{}]*)*>)?\s*::\s*)*"
    r"(?:~\s*)?(?:operator\s*(?:\(\)|[^\s(]+)|[A-Za-z_]\w*))\s*$"
)
_NOT_NAMES = set(
    "if for while switch catch return sizeof defined static_assert else do try case new delete "
    "constexpr consteval noexcept requires alignof typeid decltype throw co_await co_return "
    "__syncthreads".split()
)


_BRACKETS = {"(": re.compile(r"[()]"), "<": re.compile(r"[<>]")}
# where function_name's walk over a signature stops: a group, a trailing return type, an `=`
_SIG_MARK = re.compile(r"[(=]|->")


def _balanced_end(s: str, i: int) -> int:
    """Index after the group that opens at s[i], a '(' or a '<' (the end of `s` if unclosed)."""
    depth, opening = 0, s[i]
    for m in _BRACKETS[opening].finditer(s, i):  # only the brackets: no Python step per character
        if m.group() == opening:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.end()
    return len(s)


def _strip_template_head(sig: str) -> str:
    while (m := _TEMPLATE_HEAD.match(sig)) and m.end() < len(sig) and sig[m.end()] == "<":
        sig = sig[_balanced_end(sig, m.end()) :]
    return sig


def _without_attr_calls(sig: str) -> str:
    if "(" not in sig or not any(w in sig for w in _ATTR_WORDS):
        return sig
    while m := _ATTR_CALL.search(sig):
        sig = sig[: m.start()] + " " + sig[_balanced_end(sig, m.end() - 1) :]
    return sig


@lru_cache(maxsize=1 << 16)
def function_name(sig: str, need_type: bool = False) -> str | None:
    """The name of the function whose signature (everything before its `{`) is `sig`.
    Memoised: the versions of a file a mine scans one after another share most signatures."""
    s = _without_attr_calls(_strip_template_head(sig))
    # the parameter list is the last top-level group: drop a constructor's initialiser list
    # (`) : a(x), b{y}`) and a trailing return type first
    groups: list[tuple[int, int]] = []
    i = 0
    while mark := _SIG_MARK.search(s, i):  # the next character the walk acts on
        i = mark.start()
        if s[i] == "(":
            end = _balanced_end(s, i)
            if end >= len(s) and s.count("(", i) > s.count(")", i):
                return None  # the brace opens inside an argument list: `f({a, b})`
            groups.append((i, end))
            if re.match(r"\s*(?:const|volatile|override|final|mutable|&&?|\s)*:(?!:)", s[end:]):
                break
            i = end
            continue
        if s.startswith("->", i):
            break
        if s[i] == "=" and not s.startswith("==", i) and "operator" not in s[max(0, i - 12) : i]:
            return None  # an initialiser or a lambda bound to a name
        i += 1
    m = None
    while groups:
        start = groups.pop()[0]
        m = _NAME_BEFORE.search(s[:start])
        # `) KB_REQUIRES(...)`: an all-caps macro after the parameter list is an attribute
        if m and groups and re.fullmatch(r"[A-Z][A-Z0-9_]+", m.group(1).strip()):
            continue
        break
    if not m:
        return None
    name = re.sub(r"\s+", "", m.group(1))
    name = re.sub(r"<[^:]*?>(?=::)", "", name)
    last = name.rsplit("::", 1)[-1]
    if last in _NOT_NAMES or not name:
        return None
    before = s[: m.start()]
    if need_type and (
        not re.search(r"[\w*&>]\s*$", before)
        or re.search(r"\b(?:if|else|for|while|switch|return|do|case|co_return)\s*$", before)
        or re.search(r"[=(,]", before)
    ):
        return None  # inside a body a definition has a return type; `a.f(`, `if (` have none
    return name


def scan_defs(src: bytes | str) -> FileDefs:
    text = src.decode("utf-8", "replace") if isinstance(src, bytes) else src
    # the offset after every newline, from the lengths of the lines (C loops, no match per line)
    line_starts = [0]
    line_starts.extend(map(operator.add, accumulate(map(len, text.split("\n")[:-1])), count(1)))
    line_of = partial(bisect.bisect_right, line_starts)
    out = FileDefs(method="scanner")
    # frames: (ns | class | func | block, qualified name or "" for a block that is no
    # definition, its span kind, first line)
    stack: list[tuple[str, str, str, int]] = []
    sig_from = in_func = 0
    # `#if` stack: True while the current branch is one after the first (`#elif`, `#else`);
    # only the first branch of each conditional is read, so braces split by `#if` balance
    cond: list[bool] = []
    skip = False  # any(cond): a later branch of some `#if` is being read past
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        c = tok[0]
        if c == ";":  # the most common token
            if not skip:
                sig_from = m.end()
            continue
        if c in "/\"'R":
            continue
        if c != "{" and c != "}":  # a preprocessor line: `cond` follows its `#if`s
            d = _DIRECTIVE.match(tok)
            word = d.group(1) if d else ""
            if word in ("if", "ifdef", "ifndef"):
                cond.append(False)
            elif word in ("elif", "else", "elifdef", "elifndef") and cond:
                cond[-1] = True
            elif word == "endif" and cond:
                cond.pop()
            elif word == "define" and not skip and (macro := _DEFINE.match(tok)):
                span = Span(line_of(m.start()), line_of(m.end() - 1), macro.group(1), MACRO)
                out.spans.append(span)
            skip = any(cond)
            continue
        if skip:
            continue
        if c == "}":
            if stack:  # a stray `}` closes nothing
                tag, name, kind, start = stack.pop()
                in_func -= tag == "func"
                if name:
                    out.spans.append(Span(start, line_of(m.start()), name, kind))
            sig_from = m.end()
            continue
        # an opening brace: read its signature
        lead, tag, fname, is_global = _brace_head(text[sig_from : m.start()], in_func > 0)
        start = line_of(sig_from + lead) if lead >= 0 else line_of(m.start())
        sig_from = m.end()
        if tag == "func" and in_func:
            stack.append(("func", fname, FUNCTION, start))
        elif tag == "class" or tag == "func":
            # the innermost class frame already holds the qualified name
            scope = [n for k, n, _, _ in stack if k == "class"][-1:]
            if tag == "class":
                stack.append(("class", "::".join((*scope, fname)), CLASS, start))
            else:
                stack.append(("func", *c_function(scope, fname, is_global), start))
        else:
            stack.append((tag, "", "", start))
        in_func += tag == "func"
    for _, name, kind, start in stack:  # unclosed at the end of the file
        if name:
            out.spans.append(Span(start, len(line_starts), name, kind))
    return out.finish()


@lru_cache(maxsize=1 << 16)
def _brace_head(raw: str, in_func: bool) -> tuple[int, str, str, bool]:
    """What the text between the previous `;`, `{` or `}` and a `{` opens: (offset in `raw`
    of its first character outside comments and directives, -1 if none; `ns`, `class`,
    `func` or `block`; the class's or function's name, unqualified; whether `__global__`).
    Memoised: the versions of a file a mine scans one after another share most of these."""
    if "/" in raw or '"' in raw or "#" in raw:
        sig = _ACCESS.sub("", _NOISE.sub(" ", raw)).strip()
        lead = _FIRST.search(_NOISE.sub(lambda x: " " * len(x.group(0)), raw))
    else:  # nothing for _NOISE to match (comments, strings, directives): two passes saved
        sig = _ACCESS.sub("", raw).strip()
        lead = _FIRST.search(raw)
    at = lead.start() if lead else -1
    flat = " ".join(sig.split())
    if in_func:
        fname = function_name(flat, need_type=True) if flat else None
        return (at, "func", fname, False) if fname else (at, "block", "", False)
    if ("namespace" in flat and _NAMESPACE.search(flat)) or re.fullmatch(r"extern\s*", flat):
        return at, "ns", "", False
    core = _strip_template_head(flat).strip()
    cm = _CLASS_HEAD.match(core)
    if cm and "(" not in core[: cm.end()]:
        return at, "class", cm.group(1), False
    if flat and not re.match(r"^(?:enum|typedef\s+enum)\b", core):
        if fname := function_name(flat):
            return at, "func", fname, "__global__" in flat
    return at, "block", "", False
