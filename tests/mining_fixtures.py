"""The hand-written mining fixtures (tests/fixtures/mining/<case>/): a source file before a change
(`before.*`, or the `before.*` of the case truth.yaml's `before` names), the change as a unified
diff (`change.patch`, paths as in truth.yaml's `path`), or a new file whole (`after.*`), and the
definitions the change touches (truth.yaml). A case with neither a patch nor `after.*` deletes
the file. The patch is applied by `git apply`, as git would."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from common import load_card_entries  # noqa: E402,F401  (the tests' import of it)

FIXTURES = Path(__file__).parent / "fixtures" / "mining"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "truth.yaml").exists())


def truth(case: str) -> dict:
    return yaml.safe_load((FIXTURES / case / "truth.yaml").read_text())


def before(case: str) -> bytes | None:
    """The file before the change; None for a new file."""
    d = FIXTURES / (truth(case).get("before") or case)
    found = next(d.glob("before.*"), None)
    return found.read_bytes() if found else None


def apply_change(case: str, work: Path) -> None:
    """Make the case's change to the file under `work` (truth.yaml's `path`, holding `before`)."""
    d, path = FIXTURES / case, work / truth(case)["path"]
    after = next(d.glob("after.*"), None)
    if (d / "change.patch").exists():
        subprocess.run(["git", "apply", str(d / "change.patch")], cwd=work, check=True)
    elif after is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(after.read_bytes())
    else:
        path.unlink()


def sides(case: str) -> tuple[bytes | None, bytes | None]:
    """(the file before the change, after it), None for a side that does not exist."""
    path = truth(case)["path"]
    with tempfile.TemporaryDirectory() as tmp:
        old = before(case)
        if old is not None:
            (Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / path).write_bytes(old)
        apply_change(case, Path(tmp))
        new = Path(tmp) / path
        return old, (new.read_bytes() if new.exists() else None)
