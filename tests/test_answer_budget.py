"""An entry answer fits its character budget and still carries text, however long the title."""

from __future__ import annotations

import pytest

from kbase.serve.mcp_tools import MIN_TEXT_CHARS, dumps, fit_entry
from kbase.serve.params import MIN_MAX_CHARS


@pytest.mark.parametrize("title_len", [10, 120, 400])
@pytest.mark.parametrize("budget", [MIN_MAX_CHARS, 450, 2000])
def test_get_fits_the_budget_and_is_never_empty(title_len, budget):
    doc = {
        "id": "pr:lmdeploy#1234",
        "kind": "pr",
        "title": "Support " + "x" * title_len,
        "path": "pr_archive/lmdeploy/1234.md",
        "status": "mined",
        "repo": "lmdeploy",
        "tags": [f"techniques=t{i}" for i in range(30)],
        "sections": [{"title": f"s{i}", "line": i, "text": "..."} for i in range(12)],
        "text": "the kernel reads the block table once per tile. " * 400,
    }
    out = fit_entry(doc, budget)
    assert len(dumps(out)) <= budget, len(dumps(out))
    assert len(out["text"]) >= MIN_TEXT_CHARS and out["text"].startswith("the kernel")
    assert out["id"] == doc["id"] and out["truncated"]["total_chars"] == len(doc["text"])
