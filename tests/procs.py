"""This process's child processes, read from /proc (tests that start processes check what they
leave behind)."""

from __future__ import annotations

import os
from pathlib import Path


def children() -> list[tuple[int, str, bytes]]:
    """(pid, state letter, command line) of each child of this process; a zombie's command line
    is empty."""
    me, out = str(os.getpid()), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == me:
            out.append((int(pid), fields[0], cmd))
    return out
