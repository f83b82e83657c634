"""The runner's read-only bytecode cache: filled by the runner outside the sandbox, read by the
snippet, never writable by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kbase.ingest.skills import load_skill
from kbase.validators import run_command as pycache
from kbase.validators.runner import RunSettings, run_tier

SNIPPET = """import json, os, sys
sys.path.insert(0, {pkg_dir!r})
import kbprobe_mod
cached = kbprobe_mod.__cached__
try:
    open(os.path.join(sys.pycache_prefix, "planted.pyc"), "wb").write(b"x")
    planted = True
except OSError:
    planted = False
print("PROBE", json.dumps({{"prefix": sys.pycache_prefix, "cached": cached,
    "cached_exists": os.path.exists(cached), "planted": planted}}))"""


@pytest.fixture()
def no_bytecode_package(tmp_path, monkeypatch):
    pkg_dir = tmp_path / "site"
    pkg_dir.mkdir()
    (pkg_dir / "kbprobe_mod.py").write_text("VALUE = 42\n")
    cache = tmp_path / "cache"
    monkeypatch.syspath_prepend(str(pkg_dir))
    monkeypatch.setenv("KBASE_PYCACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(pkg_dir))  # for the runner's warm-up import
    monkeypatch.setattr(pycache, "PROBE_MODULE", "kbprobe_mod")
    monkeypatch.setattr(pycache, "WARM_MODULES", ("kbprobe_mod",))
    pycache._pycache_prefix.cache_clear()
    yield pkg_dir, cache
    pycache._pycache_prefix.cache_clear()


def test_snippets_read_the_runners_bytecode_and_cannot_write_it(tmp_path, no_bytecode_package):
    pkg_dir, cache = no_bytecode_package
    assert pycache.pycache_prefix() == str(cache)
    warmed = list(cache.rglob("kbprobe_mod*.pyc"))
    assert warmed, "the runner compiled the module into its cache"
    skill = tmp_path / "root" / "skills" / "probe" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(
        "---\nname: probe\ndescription: A fixture that looks at the bytecode cache.\n"
        'trigger: ["fixture"]\nsteps: ["look"]\n'
        'failure_modes: [{symptom: "s", cause: "c", fix: "f"}]\n'
        'verification: {tiers: [cpu-interpret], timeout_s: 60, asserts: "reads the cache"}\n'
        "audit: {date: 2026-12-01}\n---\n# probe\n\n```python verify\n"
        + SNIPPET.format(pkg_dir=str(pkg_dir))
        + "\n```\n"
    )
    out = run_tier(load_skill(skill, tmp_path / "root"), "cpu-interpret", RunSettings())
    assert out.verdict == "pass", out.output_tail
    seen = json.loads(out.output_tail.split("PROBE ", 1)[1].splitlines()[0])
    assert seen["prefix"] == str(cache)
    assert seen["cached"].startswith(str(cache)) and seen["cached_exists"]
    assert seen["planted"] is False
    assert not (cache / "planted.pyc").exists()


def test_no_cache_where_packages_have_their_own_bytecode(monkeypatch):
    monkeypatch.delenv("KBASE_PYCACHE_DIR", raising=False)
    pycache._pycache_prefix.cache_clear()
    try:
        # this machine's torch was installed with bytecode: a prefix would only hide it
        assert pycache.pycache_prefix() is None
    finally:
        pycache._pycache_prefix.cache_clear()


def test_disabled_by_setting_the_dir_to_off(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("KBASE_PYCACHE_DIR", "off")
    pycache._pycache_prefix.cache_clear()
    try:
        assert pycache.pycache_prefix() is None
    finally:
        pycache._pycache_prefix.cache_clear()
