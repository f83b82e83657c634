"""What a run prints, kept within bounds: head and tail of each stream, the `KBASE_MEASURE`
lines, and which literal triggers appeared (a literal may straddle two reads)."""

from __future__ import annotations

import re
from collections.abc import Iterable

TAIL_CHARS = 4000
CAPTURE_CAP = 1 << 20  # bytes of head and of tail kept per stream
MEASURE_RE = re.compile(r"^\s*KBASE_MEASURE\s+(\S+)\s+(\S+)\s*$")
MAX_MEASURES = 10000
# What a snippet prints reaches terminals, job summaries and HTML: control characters (ESC
# sequences retitle or rewrite a terminal, CR overwrites a line, C1 controls, bidi overrides
# reorder text) are shown as escapes instead. Newline and tab stay.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as a visible escape (\\x1b, \\u202e)."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text
    )


class Scanner:
    """Reads a stream in chunks, keeps head and tail, and spots measurements and literals."""

    def __init__(self, measures: bool, literals: Iterable[str]):
        self.head = bytearray()
        self.tail = b""
        self.dropped = 0
        self.want_measures = measures
        self.partial = b""
        self.measures: list[tuple[str, str]] = []
        self.literals = {lit: lit.encode() for lit in literals if lit}
        self.seen: set[str] = set()
        self.carry = b""
        self.span = max((len(b) for b in self.literals.values()), default=0)

    def feed(self, chunk: bytes) -> None:
        take = chunk[: CAPTURE_CAP - len(self.head)]
        self.head += take
        if rest := chunk[len(take) :]:
            self.tail = (self.tail + rest)[-CAPTURE_CAP:]
            self.dropped += len(rest)
        if self.literals and len(self.seen) < len(self.literals):
            window = self.carry + chunk
            for lit, b in self.literals.items():
                if lit not in self.seen and b in window:
                    self.seen.add(lit)
            self.carry = window[-self.span :] if self.span else b""
        if self.want_measures:
            lines = (self.partial + chunk).split(b"\n")
            self.partial = lines.pop()[-4096:]
            for raw in lines:
                if b"KBASE_MEASURE" in raw and len(self.measures) < MAX_MEASURES:
                    if m := MEASURE_RE.match(raw.decode("utf-8", "replace")):
                        self.measures.append((m.group(1), m.group(2)))

    def finish(self) -> None:
        if self.want_measures and self.partial:
            self.feed(b"\n")

    def text(self) -> str:
        cut = self.dropped - len(self.tail)
        mid = f"\n[... {cut} bytes of output not kept ...]\n".encode() if cut > 0 else b""
        return (self.head + mid + self.tail).decode("utf-8", "replace")


def pump(stream, scanner: Scanner) -> None:
    for chunk in iter(lambda: stream.read(65536), b""):
        scanner.feed(chunk)
    scanner.finish()
    stream.close()


def tail(text: str, n: int = TAIL_CHARS) -> str:
    return text if len(text) <= n else "..." + text[-n:]
