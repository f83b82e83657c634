#!/usr/bin/env python3
"""How closely vectors made elsewhere (the fp16 model copy on a GPU) agree with this machine's
fp32 model on CPU, text by text.

    python bench/vector_agreement.py SAMPLE.npz [--model PATH]

SAMPLE.npz comes from `bench/bench_build.py --device cuda --save-vectors SAMPLE.npz`: chunk ids,
the texts that build embedded, their kinds and vectors. Each text is embedded again here the way
the indexer embeds it (PR chunks cut at PR_MAX_TOKENS word pieces). Prints min / mean / p01 of
the cosines and writes bench/results/vector_agreement.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sample", type=Path)
    ap.add_argument("--model", default=None, help="fp32 model folder (default: the packaged one)")
    args = ap.parse_args()

    import numpy as np
    from kbase.retrieval.embed import get_embedder
    from kbase.retrieval.indexer import PR_MAX_TOKENS

    from kbase.config import default_model_path

    data = np.load(args.sample)
    texts, kinds, theirs = list(data["texts"]), list(data["kinds"]), data["vectors"]
    emb = get_embedder(args.model or default_model_path(), "cpu")
    ours = np.zeros_like(theirs)
    for kind in sorted(set(kinds)):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        cut = PR_MAX_TOKENS if kind == "pr" else None
        ours[idx] = emb.embed([str(texts[i]) for i in idx], max_length=cut)
    cos = np.sum(ours * theirs, axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    )
    res = {
        "texts": len(texts),
        "min_cosine": round(float(cos.min()), 7),
        "p01_cosine": round(float(np.quantile(cos, 0.01)), 7),
        "mean_cosine": round(float(cos.mean()), 7),
    }
    print(res)
    print(f"wrote {write_result('vector_agreement', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
