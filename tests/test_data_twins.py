"""The JSON twins of kbase/data's YAML files (read instead of parsing YAML on every cold search):
current, equal to the YAML, and ignored as soon as the YAML beside them changes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

import kbase.data as D

DATA = Path(D.__file__).parent


@pytest.mark.parametrize("name", D.TWINNED)
def test_each_twin_is_current_and_holds_the_yaml_data(name):
    raw = (DATA / name).read_bytes()
    twin = json.loads((DATA / (name.rsplit(".", 1)[0] + ".json")).read_text(encoding="utf-8"))
    assert twin["sha256"] == hashlib.sha256(raw).hexdigest(), "run `python -m kbase.data`"
    assert twin["data"] == yaml.safe_load(raw)
    assert D.read_yaml(name) == yaml.safe_load(raw)


def test_a_twin_is_read_only_while_its_yaml_is_unchanged(tmp_path, monkeypatch):
    for f in DATA.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(D.resources, "files", lambda _pkg: tmp_path)
    yml, twin_path = tmp_path / "fusion.yaml", tmp_path / "fusion.json"
    twin = json.loads(twin_path.read_text(encoding="utf-8"))
    twin["data"] = {"weights": {"bm25": 1.0}, "marker": "from the twin"}
    twin_path.write_text(json.dumps(twin), encoding="utf-8")
    assert D.read_yaml("fusion.yaml")["marker"] == "from the twin"  # the digest still matches
    yml.write_text(yml.read_text(encoding="utf-8") + "\nnote: edited\n", encoding="utf-8")
    got = D.read_yaml("fusion.yaml")
    assert "marker" not in got and got["note"] == "edited"  # stale twin: the YAML is parsed
    twin_path.write_text("{not json", encoding="utf-8")
    assert D.read_yaml("fusion.yaml")["note"] == "edited"
    twin_path.unlink()
    assert D.read_yaml("fusion.yaml")["note"] == "edited"
    with pytest.raises(FileNotFoundError):
        D.read_yaml("absent.yaml")
