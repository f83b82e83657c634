"""The sandbox against real hostile snippets, run in real child processes."""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kbase.ingest.skills import load_skill
from kbase.validators.runner import RunSettings, run_tier, verify_skills

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "validators"))
from attacks import host_procs_with  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "validators"


def write_skill(
    root: Path,
    name: str,
    snippet: str,
    *,
    lang: str = "python",
    tiers: str = "[cpu-interpret]",
    timeout: int = 30,
    subs: dict | None = None,
) -> Path:
    code = (FIX / "snippets" / snippet).read_text()
    for key, value in (subs or {}).items():
        code = code.replace(key, value)
    text = (
        (FIX / "skill_template.md")
        .read_text()
        .format(
            name=name,
            tiers=tiers,
            timeout=timeout,
            audit_date=dt.date.today().isoformat(),
            lang=lang,
            code=code.rstrip("\n"),
        )
    )
    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def md_line(path: Path, marker: str) -> int:
    """The 1-based line of SKILL.md that carries `marker`: where a failure must be reported."""
    lines = path.read_text().splitlines()
    return next(i + 1 for i, ln in enumerate(lines) if marker in ln)


def run(root: Path, path: Path, tier: str = "cpu-interpret", **kw):
    return run_tier(load_skill(path, root), tier, RunSettings(root=root, **kw))


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped by init."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_infinite_loop_is_killed_at_the_timeout_with_its_line(tmp_path):
    path = write_skill(tmp_path, "loop", "infinite_loop.py", timeout=2)
    start = time.monotonic()
    out = run(tmp_path, path)
    elapsed = time.monotonic() - start
    assert out.verdict == "timeout", out
    assert 2.0 <= elapsed < 6.0
    assert out.line == md_line(path, "# HANG") or out.line == md_line(path, "# HANG") + 1


def test_memory_bomb_stops_at_the_limit_of_the_run(tmp_path):
    path = write_skill(tmp_path, "bomb", "memory_bomb.py")
    out = run(tmp_path, path, memory_mb=1024)
    assert out.limits["memory_mb"] == 1024
    if out.limits["memory_scope"] == "run":  # a cgroup: the kernel OOM-kills inside the run
        assert out.verdict == "killed", out
        assert "memory limit (1024 MiB for the run) hit" in out.message
    else:  # rlimit only: the allocation fails in the snippet
        assert out.verdict == "fail", out
        assert "memory limit (1024 MiB)" in out.message
        assert out.line == md_line(path, "# BOMB")


def test_forked_sleepers_are_all_gone_afterwards(tmp_path):
    marker = "kbase-sleepers-" + str(time.time_ns())
    path = write_skill(tmp_path, "sleepers", "fork_sleepers.py", subs={"MARKER": marker})
    out = run(tmp_path, path)
    assert out.verdict == "pass", out
    deadline = time.monotonic() + 2
    while host_procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_procs_with(marker) == []


def test_parent_secrets_do_not_reach_the_snippet_and_its_directory_is_private(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("KBASE_TEST_SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    path = write_skill(tmp_path, "secret", "read_secret.py")
    out = run(tmp_path, path)
    assert out.verdict == "pass", out.output_tail
    assert out.isolated
    assert "cwd = /tmp/kbase-run HOME = /tmp/kbase-run" in out.message


def test_socket_is_refused_in_the_sandbox_and_reached_without_it(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        path = write_skill(
            tmp_path, "sock", "open_socket.py", subs={"PORT": str(listener.getsockname()[1])}
        )
        isolated = run(tmp_path, path)
        open_run = run(tmp_path, path, unsafe_no_sandbox=True)
    finally:
        listener.close()
    # without the sandbox the same snippet reaches our listener: the check can tell them apart
    assert open_run.verdict == "pass" and not open_run.isolated
    assert isolated.isolated
    assert isolated.verdict == "fail" and "refused" in isolated.output_tail, isolated


def test_segfault_is_a_killed_verdict_with_its_line(tmp_path):
    path = write_skill(tmp_path, "crash", "segfault.py")
    out = run(tmp_path, path)
    assert out.verdict == "killed", out
    assert "SIGSEGV" in out.message
    assert out.line == md_line(path, "# CRASH")


def test_assertion_failure_points_at_the_innermost_snippet_line(tmp_path):
    path = write_skill(tmp_path, "asserts", "assert_fail.py")
    out = run(tmp_path, path)
    assert out.verdict == "fail"
    assert "expected 2, got 3" in out.message
    assert out.line == md_line(path, "# ASSERT")


def test_exit_77_is_a_skip(tmp_path):
    out = run(tmp_path, write_skill(tmp_path, "skipper", "skip_itself.py"))
    assert out.verdict == "skip" and "needs a tool" in out.message


def test_real_triton_kernel_passes_in_the_interpreter(tmp_path):
    out = run(tmp_path, write_skill(tmp_path, "tri", "triton_interpret.py", timeout=120))
    assert out.verdict == "pass", out.output_tail
    assert out.fingerprint["interpret"] is True and out.fingerprint["triton"]


def test_triton_aot_compiles_for_sm90_on_cpu_compile(tmp_path):
    path = write_skill(tmp_path, "aot", "triton_aot.py", tiers="[cpu-compile]", timeout=120)
    out = run(tmp_path, path, tier="cpu-compile")
    assert out.verdict == "pass", out.output_tail
    assert "sm_90a" in out.message


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_cuda_only_snippet_is_compiled_by_nvcc_and_errors_map_to_the_md_line(tmp_path):
    good = run(
        tmp_path,
        write_skill(
            tmp_path, "cu-ok", "kernel.cu", lang="cuda", tiers="[cpu-compile]", timeout=120
        ),
        tier="cpu-compile",
    )
    assert good.verdict == "pass", good.output_tail
    assert "registers" in good.output_tail  # -Xptxas -v reports register use
    bad_path = write_skill(
        tmp_path, "cu-bad", "kernel_broken.cu", lang="cuda", tiers="[cpu-compile]", timeout=120
    )
    bad = run(tmp_path, bad_path, tier="cpu-compile")
    assert bad.verdict == "fail"
    assert bad.line == md_line(bad_path, "// BROKEN")


def test_parallel_runs_keep_skill_order(tmp_path):
    names = ["p-a", "p-b", "p-c", "p-d"]
    skills = [
        load_skill(
            write_skill(tmp_path, n, "skip_itself.py" if i % 2 else "assert_fail.py"), tmp_path
        )
        for i, n in enumerate(names)
    ]
    outs = verify_skills(skills, RunSettings(workers=2, root=tmp_path))
    assert [o.skill for o in outs] == names
    assert [o.verdict for o in outs] == ["fail", "skip", "fail", "skip"]


def test_undeclared_or_unavailable_tiers_are_skipped_with_a_reason(tmp_path):
    skill = load_skill(write_skill(tmp_path, "cpu-only", "skip_itself.py"), tmp_path)
    (gpu,) = verify_skills([skill], RunSettings(tier="gpu", root=tmp_path))
    assert gpu.verdict == "skip" and not gpu.executed and "does not declare" in gpu.message


def test_validators_import_without_the_search_stack_or_torch():
    code = (
        "import sys\n"
        "import kbase.commands.validate, kbase.validators.status, kbase.validators.report\n"
        "from kbase.validators.fingerprint import fingerprint\n"
        "fp = fingerprint('gpu')\n"
        "heavy = [m for m in ('torch', 'triton', 'chromadb', 'sentence_transformers', 'bm25s', "
        "'fastapi', 'mcp', 'git')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print(fp['torch'], fp['triton'])\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    from importlib.metadata import version

    assert p.stdout.split() == [version("torch"), version("triton")]


def test_cuda_preflight_runs_in_a_child_and_explains_a_machine_without_cuda():
    from kbase.validators.fingerprint import cuda_preflight, gpus

    why, userns, _hardening = cuda_preflight(True, 2048)
    if gpus():
        assert why is None, why
    else:
        assert why is not None and "does not initialise in the sandbox" in why and "libcuda" in why
        assert userns is None
    with open("/proc/self/maps") as fh:
        assert (
            "libcuda" not in fh.read()
        )  # the probe ran in a child; this process never loaded the driver
