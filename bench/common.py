"""Helpers shared by the benchmarks: result files, tables, percentiles, shared data."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the shared histories (../shared); KBASE_SHARED points elsewhere, e.g. from a git worktree
SHARED = Path(os.environ.get("KBASE_SHARED") or REPO.parent / "shared")
HISTORIES = ("deepgemm", "flash-attention", "lmdeploy", "flashinfer")


def children_cpu() -> float:
    """CPU seconds of every child process waited for so far (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def mine_cmd(
    repo: Path, root: Path, name: str, *extra: str, python: str = sys.executable
) -> list[str]:
    """`kbase mine` of one repository into root, with its recipe when the project has one, run by
    `python` (another checkout's interpreter imports that checkout's kbase)."""
    recipe = REPO / "pr_archive" / "recipes" / f"{name}.yaml"
    opts = {"--repo": str(repo), "--name": name, "--root": str(root)}
    if recipe.exists():  # none: mined without one
        opts["--recipe"] = str(recipe)
    return [python, "-m", "kbase.cli", "mine", *sum(opts.items(), ()), *extra, "--json"]


RESULTS = REPO / "bench" / "results"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    i = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return s[i]


def summary_ms(samples_s: list[float]) -> dict:
    ms = [x * 1000 for x in samples_s]
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "n": len(ms),
    }


# CPU features that set the speed of ONNX Runtime's int8 and fp32 kernels: two machines of the
# same kind here, with and without AVX-512 VNNI, built an index at 93 and 254 entries/s
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_info() -> str:
    """The CPU's model name and the feature flags of _CPU_FLAGS it has (Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in text.splitlines()[:40])
    )
    flags = set(fields.get("flags", "").split())
    have = [f for f in _CPU_FLAGS if f in flags]
    return f"{fields.get('model name', 'unknown')} ({' '.join(have) or 'no AVX2'})"


def write_result(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {
        "bench": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": platform.platform(),
        "cpu": cpu_info(),
        "python": platform.python_version(),
        **data,
    }
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    return out


def question_pool() -> list[str]:
    """Every distinct question of every eval set: texts the model has not embedded yet."""
    import yaml

    out: list[str] = []
    for f in sorted((REPO / "tests" / "eval").glob("*.yaml")):
        for row in yaml.safe_load(f.read_text(encoding="utf-8")) or []:
            if isinstance(row, dict) and row.get("query"):
                out.append(str(row["query"]))
    return list(dict.fromkeys(out))


def interpreter(name: str) -> str:
    """The Python interpreter `name` runs, not its launcher: pyenv's shims are shell scripts,
    ~0.1-0.2 s a start, which a start-up benchmark would count."""
    import shutil
    import subprocess

    return subprocess.run(
        [shutil.which(name) or name, "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def warm_latency(kb, queries: list[str], n: int, repo: str, tag: str) -> dict:
    """Warm search latency through the Python API, every query text unseen: the query embedding
    alone, unfiltered, kind=pr repo=X, kind=skill and a tag filter, one query of each in turn."""
    emb = kb.query_embedder()
    cases = {
        "embedding alone": lambda q: emb.embed_query(q),
        "unfiltered": lambda q: kb.search(q, k=5),
        f"kind=pr repo={repo}": lambda q: kb.search(q, k=5, kind="pr", repo=repo),
        "kind=skill": lambda q: kb.search(q, k=5, kind="skill"),
        f"tag {tag}": lambda q: kb.search(q, k=5, tags=[tag]),
    }
    kb.warm_up()
    for q in ("warm up one", "warm up two", "warm up three"):
        for fn in cases.values():
            fn(q)
    texts = [
        f"{q} (run {i // len(queries)})" if i >= len(queries) else q
        for i, q in enumerate(queries * (1 + n * len(cases) // max(1, len(queries))))
    ]
    samples: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    pcpu: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(n):
        for j, (name, fn) in enumerate(cases.items()):
            t, c, p = time.perf_counter(), time.thread_time(), time.process_time()
            fn(texts[j * n + i])  # interleaved: load on the machine hits every case alike
            samples[name].append(time.perf_counter() - t)
            cpu[name].append(time.thread_time() - c)
            pcpu[name].append(time.process_time() - p)
    res = {name: summary_ms(s) for name, s in samples.items()}
    for name, r in res.items():
        # CPU time of the searching thread, and of the whole process (ONNX Runtime's threads
        # and the searcher's: the embedding and Chroma's kNN run beside the calling thread):
        # on a shared machine the wall time includes waiting for a core.
        r["p50_thread_cpu_ms"] = summary_ms(cpu[name])["p50_ms"]
        r["p50_process_cpu_ms"] = summary_ms(pcpu[name])["p50_ms"]
    base = res["unfiltered"]["p50_ms"]
    for r in res.values():
        r["vs_unfiltered_p50"] = round(r["p50_ms"] / base, 2) if base else None
    return res


def index_args(doc: str, root_help: str, home_help: str):
    """An argument parser showing the bench's docstring, with the --root and --home of an index."""
    import argparse

    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--root", type=Path, required=True, help=root_help)
    ap.add_argument("--home", type=Path, required=True, help=home_help)
    return ap


def machine() -> dict:
    """What a mining result was measured on (git's version among it)."""
    import subprocess

    git = subprocess.run(["git", "--version"], capture_output=True, text=True)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_1min": os.getloadavg()[0],
        "git": git.stdout.strip(),
    }


def work_dir(keep: Path | None, prefix: str) -> Path:
    """The work folder of a bench over the shared histories: `keep` (reused), else a new one."""
    import tempfile

    if not (SHARED / "tools" / "replay_history.py").exists():
        raise SystemExit(f"shared histories not found at {SHARED}")
    work = keep or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work


def latency_args(ap, n: int) -> None:
    """The warm-latency options of warm_latency: timed searches per case, a repo and a tag."""
    ap.add_argument("--n", type=int, default=n, help="timed searches per case")
    ap.add_argument("--repo", default="flashinfer", help="the repo of the kind=pr repo=X case")
    ap.add_argument("--tag", default="languages=cuda-cpp", help="the tag of the tag case")


def load_card_entries(root: Path):
    """Every card under <root>/pr_archive as an index Entry, and the Problems of those that do not
    load (what retrieval/collect.py does, without its caches): for benches and tests."""
    from kbase.ingest.cards import CardProblems, card_entry, card_paths, load_card

    entries, problems = [], []
    for p in card_paths(root):
        try:
            entries.append(card_entry(load_card(Path(p), root)))
        except CardProblems as cp:
            problems.extend(cp.problems)
    return entries, problems
