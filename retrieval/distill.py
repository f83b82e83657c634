"""A pasted traceback or log, reduced to what identifies the failure (issue #25): its error lines
and the names in them, without the frames, prompts, timestamps and repeated lines around them.

A long query is mostly boilerplate (`File ".../site-packages/torch/nn/modules/module.py", line
1751, in _wrapped_call_impl`, `^^^^^`, `ERROR 07-24 11:08:41 [core.py:636]`); BM25 and the embedding
model both weigh those words like any other and drown the one line that says what went wrong.
Short queries pass through unchanged.
"""

from __future__ import annotations

import re

# A query this short, on one line, is already what a person typed; nothing to strip.
SHORT = 240

_ERROR_LINE = re.compile(
    r"(error|exception|assert|fail|fatal|abort|illegal|invalid|misaligned|out of (memory|resource)"
    r"|nan\b|\binf\b|segmentation|core dumped|warning|unsupported|undefined|not supported"
    r"|no kernel image|cannot|can't|mismatch|exceed|overflow|timeout|hang|deadlock|oom\b)",
    re.I,
)
_FRAME = re.compile(r'^\s*(File "[^"]*", line \d+|at [\w.$<>]+\(|#\d+\s+0x)', re.I)
_CARETS = re.compile(r"^[\s^~|_\-=*+.]*$")
_NOISE_LINE = re.compile(
    r"^\s*(Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause|\.\.\.|\[\.\.\.\]|Compile with `TORCH_USE_CUDA_DSA`"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING)",
    re.I,
)
# Log prefixes: "ERROR 07-24 11:08:41 [core.py:636]", "(EngineCore_DP0 pid=86)", "[rank0]:",
# "2025-02-05 21:40:57,123 -", "[16:10:33] stdout/INFO", "Dec 09 13:35:40 host name[206214]:"
_PREFIXES = [
    re.compile(r"\((?:\w+ )?(?:\w+_)*\w+ pid=\d+\)\s*"),
    re.compile(r"\[rank\d+\]:?\s*"),
    re.compile(
        r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
        r"\d\d-\d\d \d\d:\d\d:\d\d\s*(\[[^\]]*\])?\s*"
    ),
    re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s*(?:-\s*)?"),
    re.compile(r"\[\d\d:\d\d:\d\d\]\s*"),
    re.compile(r"^[A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \S+ [\w.-]+\[\d+\]:\s*"),
    re.compile(r"\[TP\d+\]\s*|\(\w*Worker\w* [^)]*\)\s*"),
]
_PATH = re.compile(r"(?:/[\w.+-]+){2,}/([\w.+-]+)")  # keep a path's last component
_HEX = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_THREAD_COORDS = re.compile(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\]\s*")


def _clean(line: str) -> str:
    for rx in _PREFIXES:
        line = rx.sub("", line)
    line = _THREAD_COORDS.sub("", line)
    line = _HEX.sub("", _PATH.sub(r"\1", line))
    return re.sub(r"\s+", " ", line).strip()


def distill(query: str) -> str:
    """The error lines of a pasted log (cleaned, each once, in order) plus the free text around
    them; the query itself when it is short or has no recognisable error line."""
    if len(query) <= SHORT and "\n" not in query:
        return query
    kept: list[str] = []
    seen: set[str] = set()
    prose: list[str] = []
    for raw in query.splitlines():
        if _FRAME.match(raw) or _CARETS.match(raw) or _NOISE_LINE.match(raw):
            continue
        line = _clean(raw)
        if not line or line in seen:
            continue
        seen.add(line)
        if _ERROR_LINE.search(line):
            kept.append(line)
        elif not re.search(r"[=(){}\[\];]|^\s*(return|def|import|from)\b", raw) and len(line) > 3:
            prose.append(line)  # a sentence the person wrote, not a code line
    if not kept:
        return re.sub(r"\s+", " ", " ".join(prose)).strip() or query
    # The last error line is usually the one raised; keep a few of them and the person's words.
    out = " ".join([*prose[:3], *kept[-4:]])
    return out[:1200]
