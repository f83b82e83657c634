"""The last step of every build (retrieval/indexer.py): re-export the ONNX query model when the
embedding model changed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def refresh_onnx(
    home: Path,
    embedder_factory: Callable[[], object],
    embedder: object = None,
    model_path: str | None = None,
) -> None:
    """Keep home/onnx, the fast query embedder (retrieval/onnx_query.py), in step with the model.
    Only when torch is importable; a failure is a warning on stderr, never a failed index."""
    import importlib.util
    import sys

    try:
        from kbase.retrieval import onnx_export as OX
        from kbase.retrieval import onnx_query as OQ

        from kbase.config import model_installed

        if not OQ.enabled() or not model_installed():
            return  # the model shipped in the package serves (retrieval/shipped_model.py)
        if importlib.util.find_spec("torch") is None:
            return
        real = getattr(embedder, "real", None)
        if real is not None:  # shipped vectors: the model behind them, if it was loaded
            embedder = real() if getattr(embedder, "loaded", False) else None
        path = getattr(embedder, "model_path", None)
        if path is None:  # nothing was embedded: find the path without loading the model
            path = model_path
            if path is None:
                from kbase.config import default_model_path

                path = default_model_path()
        if OQ.is_fresh(home / OQ.ONNX_DIR, path):
            return
        if embedder is None:
            embedder = embedder_factory()
            if hasattr(embedder, "real"):
                embedder = embedder.real()
        path = getattr(embedder, "model_path", None)
        if path is None or not hasattr(embedder, "model"):
            return  # not a sentence-transformers Embedder (a test double): nothing to export
        OX.ensure_onnx(home, path, embedder)
    except Exception as exc:  # noqa: BLE001
        print(
            f"kbase: warning: ONNX query model not exported ({type(exc).__name__}: {exc}); "
            "searches will load torch instead",
            file=sys.stderr,
        )
