"""Issue #28: a failing snippet cannot make the runner say pass. Each attack runs in the real
bubblewrap sandbox through the real runner; the verdict must be what the snippet did, not the
exit status it managed to leave behind."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from kbase.ingest.skills import load_skill
from kbase.validators.runner import RunSettings, run_tier

SKILL = """---
name: {name}
description: A snippet that tries to pass while failing.
trigger: ["fixture"]
steps: ["run the snippet"]
failure_modes: [{{symptom: "-", cause: "-", fix: "-"}}]
verification: {{tiers: [cpu-interpret], timeout_s: 20, asserts: "the verdict is honest"}}
audit: {{date: {date}}}
claims:
  - {{id: speedup, text: "at least 1.5x", expect: ">= 1.5"}}
  - {{id: err, text: "at most 1e-3", expect: "<= 0.001"}}
---
# {name}

```python verify
{code}
```
"""


def run(tmp: Path, code: str):
    path = tmp / "skills" / "forge" / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    code = textwrap.dedent(code).strip("\n")
    path.write_text(SKILL.format(name="forge", date=dt.date.today().isoformat(), code=code))
    return run_tier(load_skill(path, tmp), "cpu-interpret", RunSettings(root=tmp))


MEASURED = 'print("KBASE_MEASURE speedup 2.0"); print("KBASE_MEASURE err 0.0")\n'

ATTACKS = {
    "atexit-exit-0": """
        import atexit, os
        atexit.register(lambda: os._exit(0))
        assert False, "the kernel is wrong"
    """,
    "excepthook-exit-0": """
        import os, sys
        sys.excepthook = lambda *a: os._exit(0)
        assert False, "the kernel is wrong"
    """,
    "exit-0-mid-run": """
        import os
        os._exit(0)
        assert False
    """,
    # re-executes itself (bootstrap and all) with asserts compiled out
    "reexec-python-O": """
        import os, sys
        if sys.flags.optimize == 0:
            argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")[:-1]
            os.execv(argv[0], [argv[0], b"-O", *argv[1:]])
        assert False, "only runs with asserts on"
    """,
    "assert-in-thread": """
        import threading
        def check():
            assert False, "the result is wrong"
        t = threading.Thread(target=check)
        t.start(); t.join()
    """,
    "assert-in-daemon-thread": """
        import threading
        t = threading.Thread(target=lambda: 1 / 0, daemon=True)
        t.start(); t.join()
    """,
    "quiet-threading-excepthook": """
        import threading
        threading.excepthook = lambda args: None
        t = threading.Thread(target=lambda: 1 / 0)
        t.start(); t.join()
    """,
    # bwrap's pid 1 tells the outer bwrap the exit status through an eventfd: steal it, say 0
    "forge-bwrap-status": """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        pid1 = os.pidfd_open(1)
        for name in os.listdir("/proc/1/fd"):
            if os.readlink(f"/proc/1/fd/{name}") == "anon_inode:[eventfd]":
                fd = libc.syscall(438, pid1, int(name), 0)  # pidfd_getfd (x86_64)
                os.write(fd, (1).to_bytes(8, "little"))
        import time; time.sleep(5)
        assert False
    """,
    # a forked child returns from the snippet (its bootstrap writes the record: same fd, same
    # nonce), then the parent, whose check failed, leaves with status 0
    "forked-child-completes": """
        import faulthandler, os
        faulthandler.cancel_dump_traceback_later()
        pid = os.fork()
        if pid != 0:
            os.waitpid(pid, 0)
            os._exit(0)  # the parent's result was wrong
    """,
    # module attributes the end of a run calls, replaced so that the checks do nothing
    "late-thread-after-a-no-op-shutdown": """
        import threading, time
        threading._shutdown = lambda: None
        def check():
            time.sleep(0.5)
            assert False, "the result is wrong"
        threading.Thread(target=check).start()
    """,
    "no-op-sys-exit": """
        import sys, threading
        sys.exit = lambda *a: None
        t = threading.Thread(target=lambda: 1 / 0)
        t.start(); t.join()
    """,
    "inf-speedup": 'print("KBASE_MEASURE speedup inf"); print("KBASE_MEASURE err 0.0")',
    "minus-inf-error": 'print("KBASE_MEASURE speedup 2.0"); print("KBASE_MEASURE err -inf")',
}


@pytest.mark.parametrize("name", ATTACKS)
def test_a_failing_snippet_does_not_pass(tmp_path, name):
    code = ATTACKS[name]
    if "KBASE_MEASURE" not in code:
        code = MEASURED + textwrap.dedent(code)
    out = run(tmp_path, code)
    assert out.verdict != "pass", (name, out.message, out.output_tail)


def test_an_honest_snippet_still_passes_with_threads_and_sys_exit_0(tmp_path):
    out = run(
        tmp_path,
        MEASURED
        + "import sys, threading\n"
        + "t = threading.Thread(target=lambda: None)\n"
        + "t.start(); t.join()\n"
        + "sys.exit(0)\n",
    )
    assert out.verdict == "pass", (out.message, out.output_tail)


def _hash_of(tmp: Path, body: str) -> str:
    path = tmp / "skills" / "forge" / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = SKILL.format(name="forge", date=dt.date.today().isoformat(), code="pass")
    path.write_text(text.replace("```python verify\npass\n```\n", body))
    return load_skill(path, tmp).snippet_sha256()


def test_moving_a_fence_that_changes_what_runs_changes_the_snippet_hash(tmp_path):
    # the old hash fed info + code of each block with no boundary: these two hashed the same,
    # yet the first runs s = "\npython verify\n" and the second s = "\n"
    one = "```python verify\ns = '''\npython verify\n'''\n```\n"
    two = "```python verify\ns = '''\n```\n\n```python verify\n'''\n```\n"
    assert _hash_of(tmp_path, one) != _hash_of(tmp_path, two)
    # a fence moved between Python blocks runs the same bytes: same hash
    three = "```python verify\nx = 1\ny = 2\n```\n"
    four = "```python verify\nx = 1\n```\n\n```python verify\ny = 2\n```\n"
    assert _hash_of(tmp_path, three) == _hash_of(tmp_path, four)


FORGE_PID1 = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pid1 = os.pidfd_open(1)
for name in os.listdir("/proc/1/fd"):
    try:
        if os.readlink(f"/proc/1/fd/{name}") == "anon_inode:[eventfd]":
            fd = libc.syscall(438, pid1, int(name), 0)
            if fd >= 0:
                os.write(fd, (1).to_bytes(8, "little"))
    except OSError:
        pass
"""


def test_a_compiled_programs_status_comes_from_its_wrapper_not_bwrap():
    """What a CUDA program runs under (run_command._SHELL_WRAPPER): a program that forges
    bwrap's exit status and then fails still fails, and one that kills its wrapper is no pass."""
    import sys

    from kbase.validators.run_command import _SHELL_WRAPPER
    from kbase.validators.sandbox import Limits, run_sandboxed

    def run(script: str):
        argv = [sys.executable, "-c", _SHELL_WRAPPER, script]
        return run_sandboxed(argv, {"forge.py": FORGE_PID1}, Limits(timeout_s=20), lambda _: {})

    forged = run("python3 forge.py; sleep 1; exit 3")
    assert forged.returncode == 3 and forged.completed
    ok = run("exit 0")
    assert ok.returncode == 0 and ok.completed
    killed = run("kill -9 $PPID; exit 0")  # the wrapper gone: no record, never a pass
    assert not killed.completed


def test_an_idle_thread_pool_left_open_does_not_hang_the_honest_run(tmp_path):
    """The completion record waits for the snippet's threads the way the interpreter's exit does:
    a ThreadPoolExecutor never shut down ends through its atexit hook instead of blocking the run
    until its timeout (the async-launch skill emulates streams with one)."""
    res = run(
        tmp_path,
        """
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(max_workers=2)
        assert pool.submit(lambda: 21 * 2).result() == 42
        """
        + MEASURED,
    )
    assert res.verdict == "pass", res.message
    assert res.duration_s < 15
