"""Issue #28: `kill -9` of kbase while a snippet runs leaves nothing behind for long: the run's
processes die with it, and the next run removes the cgroup and temp folder it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import snippet_skill
from kbase.ingest.skills import load_skill
from kbase.validators.cgroup import CGROUP_ROOT
from kbase.validators.runner import RunSettings, run_tier


def _skill(root: Path, name: str, code: str) -> Path:
    return snippet_skill(root, name, code, timeout=60)


def _alive_with(marker: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    out.append(int(entry))
        except (OSError, ValueError):
            continue
    return out


def _leftovers(pid: int) -> list[Path]:
    prefix = f"kbase-run-{pid}-"
    found = [p for p in Path(tempfile.gettempdir()).glob(prefix + "*")]
    return found + [p for p in CGROUP_ROOT.glob(f"**/{prefix}*") if p.is_dir()]


def test_a_killed_kbase_leaves_no_process_and_its_leftovers_are_swept(tmp_path):
    marker = f"{time.time_ns() % 10**9}.123"
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(60)"
    _skill(tmp_path, "sleeper", code)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbase.cli", "verify", "sleeper", "--no-record"],
        cwd=tmp_path,
        env={**os.environ, "KBASE_ROOT": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not _alive_with(marker):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    assert _leftovers(proc.pid)  # the run's temp folder (and cgroup, where allowed) exist
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive_with(marker), "a process of the run outlived kbase"
    # the next run, in this process, sweeps what the killed one could not remove
    out = run_tier(
        load_skill(_skill(tmp_path, "quick", "print('ok')"), tmp_path),
        "cpu-interpret",
        RunSettings(root=tmp_path),
    )
    assert out.verdict == "pass", out.output_tail
    assert _leftovers(proc.pid) == []
