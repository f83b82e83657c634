"""What `kbase index` reports of a build (retrieval/indexer.py): counts, what was embedded,
removed or kept, problems, and the seconds of each stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from kbase.schema import Problem

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class IndexReport:
    entries: int = 0
    chunks: int = 0
    embedded_entries: list[str] = field(default_factory=list)
    embedded_chunks: int = 0
    removed_entries: list[str] = field(default_factory=list)
    kept_previous: list[str] = field(default_factory=list)  # failed to parse; old version kept
    problems: list[Problem] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    generation: str = ""
    backend: str = ""  # what embedded this run's chunks: onnxruntime or torch

    def as_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "problems": [p.model_dump() for p in self.problems],
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }
