"""kbase: a searchable, verified knowledge base of GPU-kernel engineering experience.

`from kbase import KnowledgeBase` is lazy: heavy dependencies load on first use."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["KnowledgeBase", "__version__"]


def __getattr__(name: str):
    if name == "KnowledgeBase":
        from kbase.api import KnowledgeBase

        return KnowledgeBase
    raise AttributeError(name)
