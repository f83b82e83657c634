"""Search hits carry the ledger's status; failing entries rank below healthy ones."""

from __future__ import annotations

import os

from conftest import run_cli, skill_text, write_skill

from kbase.api import KnowledgeBase


def test_failing_skill_ranks_below_verified_one(kb_root, embedder, tmp_path):
    # The failing skill is the better textual match, so only its status can push it down.
    write_skill(
        kb_root,
        "broken-claim",
        text=skill_text(
            "broken-claim",
            description="Warp shuffle reduction with __shfl_down_sync and the full mask rule.",
            trigger="warp shuffle reduction __shfl_down_sync wrong sum",
        ).replace("assert 1 + 1 == 2", "assert 1 + 1 == 3"),
    )
    write_skill(
        kb_root,
        "sound-claim",
        description="Notes on block reductions.",
        trigger="block sum is wrong",
    )
    env = {**os.environ, "KBASE_ROOT": str(kb_root)}
    run = run_cli("verify", "--tier", "cpu-interpret", "--json", env=env)
    assert run.returncode == 1, run.stdout + run.stderr  # one snippet fails
    kb = KnowledgeBase(root=kb_root, home=tmp_path / "home")
    assert not kb.index().problems
    q = "__shfl_down_sync full mask warp shuffle reduction sum"
    raw = [c.entry.id for c in kb.searcher().search(q, k=2)]
    assert raw[0] == "broken-claim"  # best match before status is applied
    hits = kb.search(q, k=2)
    assert [h.id for h in hits] == ["sound-claim", "broken-claim"]
    assert hits[0].status == "verified" and hits[0].verified_on and hits[0].verified_at
    assert hits[1].status == "failing"
    only_failing = kb.search(q, k=5, status="failing")
    assert [h.id for h in only_failing] == ["broken-claim"]
