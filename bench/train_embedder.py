#!/usr/bin/env python3
"""Fine-tune a query encoder on the project's own text (issue #25): a maintainer's experiment, not
part of what kbase runs. Export the result with bench/onnx_export.py and measure it on the tune
halves before shipping anything.

    python bench/train_embedder.py OUT_DIR [--root ROOT] [--pr-root KB_ROOT] [--epochs 2]
        [--layers 6] [--batch 32] [--lr 3e-5] [--distill 1.0] [--seed 0] [--json]

Only the query side is trained; documents keep the shipped model's vectors (the seed vectors of
kbase/data/model/seed.npz, the same the index holds). So an existing index stays valid, and a step
costs the forward and backward pass of a few dozen short queries, not of their documents: a first
try that trained both sides on (trigger, skill chunk) pairs ran at ~20 s a step on two shared
cores, over an hour for two epochs.

Anchors come only from the shipped skills (ROOT/skills): each trigger and each failure-mode symptom.
An anchor is scored against every skill chunk (scaled cosine, as MultipleNegativesRankingLoss
does), a skill scores the log-sum-exp of its chunks, and the loss is the cross-entropy of the
anchor's own skill over all skills. The chunks that hold the anchor verbatim (its skill's trigger
or failure-mode list) are left out of its own skill's score: kept, the anchor matches its own words
and the step teaches nothing about new wordings.

--distill keeps the encoder where it was for text it is not trained on: PR card titles from
--pr-root (a root whose pr_archive/ was mined from the shared histories, as bench/devset_kb.py
does) are pulled toward the shipped model's vectors of them (1 - cosine), so PR search, which has
no trained pairs, keeps its queries. --layers 4 keeps the first four transformer layers (about a
third less query time). No question of bench/realprobs.yaml or of the dev sets is read.
Deterministic for a seed and thread count; progress on stderr; --json prints the summary.

Measured (2026-12-06, defaults, 6 layers, 180 steps: 21.5 min on two shared cores), tune halves
only, the tuned query encoder against the shipped model with the same documents and weights:
dense alone gains (real-problem fresh rows Hit@1 0.455 -> 0.618, MRR 0.620 -> 0.705; dev skills
MRR 0.750 -> 0.776), but the hybrid ranking does not: leave-repository-out CV on the fresh rows
(bench/cv_fusion.py, n=55) MRR 0.818 -> 0.825 with the shipped weights and 0.835 -> 0.814 refitted,
old rows 0.955 -> 0.939; bench_realprobs --blind tune MRR 0.875 both, fresh tune rows 0.656 ->
0.627; dev-set tune halves: skills 0.943 both, PRs 0.764 -> 0.781. Not shipped. --layers 4
(10.5 min) embeds a query in 3.4 ms where six layers take 5.1 (p50, ONNX Runtime, two threads)
but loses in dense alone (dev skills MRR 0.750 -> 0.591, old real rows 0.728 -> 0.548).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCALE = 20.0  # the cosine scale of sentence-transformers' MultipleNegativesRankingLoss
VERBATIM = ("trigger", "failure_modes")  # sections that list the anchors themselves


def skill_data(root: Path) -> tuple[list[str], list[int], list[str], list[tuple[str, int, list]]]:
    """(chunk texts as the index embeds them, each chunk's skill number, skill ids,
    anchors as (text, skill number, chunk numbers left out of its skill's score))."""
    from kbase.ingest.skills import load_skill
    from kbase.retrieval import build_stages as DT
    from kbase.retrieval.collect import collect_entries

    entries, problems, _ = collect_entries(root)
    if problems:
        raise SystemExit(f"{problems[0].path}:{problems[0].line}: {problems[0].message}")
    texts: list[str] = []
    owner: list[int] = []
    ids: list[str] = []
    anchors = []
    for e in (e for e in entries if e.kind == "skill"):
        k = len(ids)
        ids.append(e.id)
        first = len(texts)
        texts += [DT.dense_text(e, c) for c in e.chunks]
        owner += [k] * len(e.chunks)
        own = [first + j for j, c in enumerate(e.chunks) if c.section in VERBATIM]
        meta = load_skill(root / e.path, root).meta
        for a in dict.fromkeys([*meta.trigger, *(f.symptom for f in meta.failure_modes)]):
            anchors.append((a, k, [j for j in own if a in texts[j]]))
    return texts, owner, ids, anchors


def pr_titles(root: Path) -> list[str]:
    """Every card title under root/pr_archive (read from the front-matter line, no full parse)."""
    import yaml

    pat = re.compile(r"^title: (.*)$", re.M)
    out = []
    for f in sorted((root / "pr_archive").rglob("*.md")):
        m = pat.search(f.read_text(encoding="utf-8", errors="replace")[:4000])
        if m:
            t = yaml.safe_load(m.group(1))
            if isinstance(t, str) and t.strip():
                out.append(t.strip())
    return sorted(set(out))


def doc_vectors(texts: list[str], stock) -> np.ndarray:
    """The shipped model's vectors of the skill chunks: the seed's, embedded where it lacks one."""
    from kbase.retrieval.onnx_embed import Seed

    seed = Seed("")
    got = [seed.get(t, None) for t in texts]
    todo = [i for i, v in enumerate(got) if v is None]
    if todo:
        print(f"embedding {len(todo)} chunks the seed lacks", file=sys.stderr, flush=True)
        fresh = stock.encode([texts[i] for i in todo], batch_size=32, normalize_embeddings=True)
        for j, i in enumerate(todo):
            got[i] = fresh[j]
    return np.stack(got).astype(np.float32)


def truncate_layers(model, layers: int) -> None:
    enc = model[0].auto_model.encoder
    if layers < len(enc.layer):
        import torch

        enc.layer = torch.nn.ModuleList(list(enc.layer)[:layers])
        model[0].auto_model.config.num_hidden_layers = layers


def loss_fn(q, docs, owner, n_skills: int, targets, masks):
    """Cross-entropy of each anchor's skill over all skills (log-sum-exp of each skill's chunks)."""
    import torch

    s = q @ docs.T * SCALE  # anchors x chunks
    s = s.masked_fill(masks, float("-inf"))
    per = torch.full((len(q), n_skills), float("-inf"))
    per = per.scatter_reduce(1, owner.expand(len(q), -1), s, reduce="amax", include_self=True)
    # log-sum-exp per skill, stabilised by each skill's max
    ex = torch.exp(s - per.gather(1, owner.expand(len(q), -1)))
    sums = torch.zeros_like(per).scatter_add(1, owner.expand(len(q), -1), ex)
    return torch.nn.functional.cross_entropy(per + torch.log(sums), targets)


def train(args: argparse.Namespace) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    from kbase.config import default_model_path

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    texts, owner_l, ids, anchors = skill_data(args.root)
    base = args.base or default_model_path()
    stock = SentenceTransformer(base, device="cpu").eval()
    docs = torch.from_numpy(doc_vectors(texts, stock))
    owner = torch.tensor(owner_l)[None, :]
    titles: list[str] = pr_titles(args.pr_root) if args.pr_root and args.distill else []
    titles = [titles[int(i)] for i in rng.permutation(len(titles))[: args.pr_titles]]
    with torch.no_grad():
        teacher = torch.from_numpy(stock.encode(titles, batch_size=64, normalize_embeddings=True))
    del stock
    model = SentenceTransformer(base, device="cpu")
    truncate_layers(model, args.layers)
    model.max_seq_length = args.max_seq
    # the word-piece table is half the weights: its gradient and optimizer state cost as much as
    # the layers' here, and 2,859 short anchors touch too few rows of it to tune it well
    model[0].auto_model.embeddings.word_embeddings.weight.requires_grad_(False)
    print(
        f"{len(anchors)} anchors of {len(ids)} skills, {len(texts)} chunks, {len(titles)} PR "
        f"titles ({time.perf_counter() - t0:.0f}s)",
        file=sys.stderr,
        flush=True,
    )
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.01)
    per_epoch = -(-len(anchors) // args.batch)
    total = per_epoch * args.epochs
    warm = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm)))
    )

    def embed(batch: list[str]):
        return model(model.preprocess(batch))["sentence_embedding"]

    t1, step, losses = time.perf_counter(), 0, []
    model.train()
    for epoch in range(args.epochs):
        run = []
        order = rng.permutation(len(anchors))
        for b in range(per_epoch):
            rows = [anchors[int(i)] for i in order[b * args.batch : (b + 1) * args.batch]]
            masks = torch.zeros(len(rows), len(texts), dtype=torch.bool)
            for r, (_, _, own) in enumerate(rows):
                masks[r, own] = True
            loss = loss_fn(
                embed([a for a, _, _ in rows]),
                docs,
                owner,
                len(ids),
                torch.tensor([k for _, k, _ in rows]),
                masks,
            )
            if titles:
                pick = rng.integers(0, len(titles), args.batch // 2)
                got = embed([titles[int(i)] for i in pick])
                loss = loss + args.distill * (1 - (got * teacher[pick]).sum(-1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            run.append(float(loss.detach()))
            step += 1
            if step % 10 == 0 or step == total:
                el = time.perf_counter() - t1
                left = el / step * (total - step)
                print(
                    f"epoch {epoch + 1}/{args.epochs} step {step}/{total} loss "
                    f"{np.mean(run[-10:]):.4f} ({el:.0f}s, ~{left:.0f}s left)",
                    file=sys.stderr,
                    flush=True,
                )
        losses.append(round(float(np.mean(run)), 4))
    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save(str(args.out))
    keep = ("layers", "epochs", "batch", "lr", "max_seq", "distill", "seed", "threads")
    return {
        "out": str(args.out),
        "anchors": len(anchors),
        "skills": len(ids),
        "chunks": len(texts),
        "pr_titles": len(titles),
        **{k: getattr(args, k) for k in keep},
        "steps": total,
        "loss_per_epoch": losses,
        "train_seconds": round(time.perf_counter() - t1, 1),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out", type=Path, help="folder for the fine-tuned sentence-transformers model")
    ap.add_argument("--root", type=Path, default=REPO, help="checkout whose skills/ train it")
    ap.add_argument("--base", default="", help="model to start from (default: the shipped one's)")
    ap.add_argument("--pr-root", type=Path, default=None, help="a root with a mined pr_archive/")
    ap.add_argument("--pr-titles", type=int, default=2000, help="PR titles kept for --distill")
    ap.add_argument("--distill", type=float, default=1.0, help="weight of the PR-title term")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--max-seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args()
    res = train(args)
    print(
        json.dumps(res, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in res.items())
    )


if __name__ == "__main__":
    main()
