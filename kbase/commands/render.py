"""How search hits read in a terminal and in a pipe.

One hit per block, at the console's width (80 columns when output is piped or the width is
unknown): a head line `N. id  status  title`, then `where` (path:line and section), then the
snippet on its own lines. In a pipe there is no colour and no box drawing, so `grep` and `less`
see plain text; ids are never folded in the middle.
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

from rich.console import Console
from rich.text import Text

from kbase.closed_sets import STATUS_SPECS


def _console() -> Console:
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(width=80, no_color=True, highlight=False, color_system=None, soft_wrap=False)


def render_hits(hits: list[Any]) -> None:
    con = _console()
    width = max(40, min(con.width, 120))
    for i, h in enumerate(hits, 1):
        lead = f"{i}. "
        pad = " " * len(lead)
        head = Text(lead)
        head.append(h.id, style="bold")
        head.append("  ")
        spec = STATUS_SPECS.get(h.status)
        head.append(h.status, style=spec.style if spec else "")
        rest = width - len(lead) - len(h.id) - len(h.status) - 4
        title = h.title if len(h.title) <= max(rest, 10) else h.title[: max(rest, 10) - 1] + "…"
        if rest >= 10:
            head.append("  " + title)
        con.print(head, soft_wrap=True)
        if rest < 10:  # a long id: the title goes on its own line rather than folding the id
            con.print(Text(pad + title[: width - len(pad)]), soft_wrap=True)
        where = f"{h.path}:{h.line}" if h.line else h.path
        if h.section:
            where += f" ({h.section})"
        if getattr(h, "confidence", None) is not None:
            where += f"  confidence {h.confidence:.2f}"
        con.print(Text(pad + where, style="dim"), soft_wrap=True)
        snippet = " ".join(h.snippet.split())
        for line in textwrap.wrap(snippet, width=width - len(pad))[:3]:
            con.print(Text(pad + line), soft_wrap=True)
        if i < len(hits):
            con.print()
