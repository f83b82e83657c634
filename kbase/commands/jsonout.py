"""`--json` output, shared by the typer commands and the fast search path (no typer here)."""

from __future__ import annotations

import json
import sys
from typing import Any


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=None, default=str) + "\n")
