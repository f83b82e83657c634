"""Every attack of issue #10 against the real runner in the real bubblewrap sandbox.

Sizes are scaled down (ATTACK_SCALE) to keep CI fast; bench/bench_sandbox.py runs them at full
size. Each attack must end with the runner's verdict recorded, nothing left behind, the ledger
holding only the runner's own row, outside processes untouched and no secret visible.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "validators"))
from attacks import ATTACKS, run_attack  # noqa: E402

ATTACK_SCALE = 0.05


# Without a user namespace every run is uid 65534 and RLIMIT_NPROC counts that uid's processes
# machine-wide: the unbounded fork bomb on one worker left the 500-fork one on the other too few
# (a CI failure), so the fork bombs share one xdist worker and run one after the other.
_PARAMS = [
    pytest.param(a, id=a.name, marks=[pytest.mark.xdist_group("fork-bombs")])
    if a.name.startswith("fork-bomb")
    else pytest.param(a, id=a.name)
    for a in ATTACKS
]


@pytest.mark.parametrize("attack", _PARAMS)
def test_attack_is_contained(attack):
    result = run_attack(attack, scale=ATTACK_SCALE)
    assert result.contained, (result.problems, result.leftovers, result.outcome)
    assert result.outcome.isolated and result.outcome.limits["cgroup"] in (None, "v1", "v2")


def test_a_run_records_the_limits_in_force():
    result = run_attack(next(a for a in ATTACKS if a.name == "raise-rlimits"), scale=0.05)
    limits = result.outcome.limits
    assert limits["nproc"] > 0 and limits["fsize_mb"] > 0 and limits["cpu_s"] > 0
    assert limits["disk_mb"] > 0 and "userns" in limits
    if limits["cgroup"]:
        assert limits["memory_scope"] == "run" and limits["pids"] == 512
