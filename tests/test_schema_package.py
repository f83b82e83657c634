"""kbase.schema is a package of small modules: `from kbase.schema import X` works for every model,
and a model's annotations resolve in the module that defines it."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from kbase.retrieval.collect import module_files, source_digest
from pydantic import BaseModel

import kbase.schema

SUBMODULES = sorted(
    f"kbase.schema.{p.stem}"
    for p in Path(kbase.schema.__file__).parent.glob("*.py")
    if p.stem != "__init__"
)


@pytest.mark.parametrize("module", SUBMODULES)
def test_every_model_of_a_schema_module_is_exported(module):
    """A model added to a module and not to the package would not import as kbase.schema.X."""
    mod = importlib.import_module(module)
    models = [
        name
        for name, obj in vars(mod).items()
        if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == module
    ]
    assert models
    assert [m for m in models if getattr(kbase.schema, m, None) is not getattr(mod, m)] == []


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_an_unknown_name_is_an_attribute_error_and_an_import_error():
    with pytest.raises(AttributeError, match="module 'kbase.schema' has no attribute 'Nope'"):
        kbase.schema.Nope  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'Nope' from 'kbase.schema'"):
        from kbase.schema import Nope  # noqa: F401


def test_a_model_resolves_names_from_another_schema_module():
    """PRCard's tags are Tags (kbase.schema.base), a hit's claims ClaimViews: each module imports
    what its annotations name, so a deferred validator builds in a process that imported only it."""
    code = (
        "from kbase.schema import PRCard, EntryDoc\n"
        "c = PRCard(repo='r', pr=1, sha='abc', date='2024-01-01', title='t', "
        "tags={'languages': ['cuda']})\n"
        "d = EntryDoc(id='x', kind='skill', title='t', path='p', status='verified', "
        "claims=[{'id': 'c', 'text': 't'}])\n"
        "print(type(c.tags).__name__, type(d.claims[0]).__name__)"
    )
    out = _fresh(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Tags", "ClaimView"]


def test_the_source_digest_of_a_package_covers_its_modules(tmp_path, monkeypatch):
    """Caches keyed by kbase.schema's code (cards, parsed entries, claim views) must miss when any
    of its modules changes, not only its __init__."""
    pkg = tmp_path / "digestpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""init"""\n')
    (pkg / "models.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_files("digestpkg") == [str(pkg / "__init__.py"), str(pkg / "models.py")]
    before = source_digest(["digestpkg"])
    (pkg / "models.py").write_text("X = 2\n")
    assert source_digest(["digestpkg"]) != before
    files = module_files("kbase.schema")
    assert {Path(f).stem for f in files} == {"__init__"} | {m.rsplit(".", 1)[1] for m in SUBMODULES}
