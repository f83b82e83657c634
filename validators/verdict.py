"""The verdict of one snippet run, read from what the sandbox returned: pass, fail, skip,
timeout, killed or error, with the snippet line at fault and a one-line message.
"""

from __future__ import annotations

import signal

from kbase.validators.sandbox import Limits, SandboxResult
from kbase.validators.snippets import SnippetLayout, locate_failure

SKIP_EXIT = 77  # the automake convention: "this test cannot run here"

# host-side allocation failures only: "CUDA out of memory" is the device, not our limit
_MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "std::bad_alloc", "Cannot allocate memory")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _judge(
    res: SandboxResult, layout: SnippetLayout, limits: Limits, timeout: float
) -> tuple[str, int | None, str]:
    output = res.stderr + "\n" + res.stdout
    if res.error:
        return "error", None, res.error
    if res.timed_out:
        return "timeout", locate_failure(layout, output), f"ran past the {timeout:g} s timeout"
    rc = res.returncode
    if rc == 0 and not res.completed:
        # exit status 0 without the completion record: os._exit(0) from an exit hook, a
        # re-executed interpreter, a forged sandbox status. The snippet did not finish.
        return (
            "fail",
            locate_failure(layout, output),
            "exited 0 without finishing its main (os._exit, an exit hook or a re-exec?)",
        )
    if rc == 0:
        return "pass", None, _last_line(res.stdout)
    if rc == SKIP_EXIT:
        return (
            "skip",
            None,
            _last_line(res.stdout + "\n" + res.stderr) or "the snippet skipped itself (exit 77)",
        )
    line = locate_failure(layout, output)
    hit = f"memory limit ({limits.memory_mb} MiB for the run) hit" if res.memory_hit else ""
    if res.pids_hit:
        hit = (hit + "; " if hit else "") + f"process limit ({limits.pids}) hit"
    if rc is not None and rc < 0:
        if -rc == signal.SIGXCPU:
            return "killed", line, f"CPU-time limit exceeded ({res.signal_name})"
        if -rc == signal.SIGXFSZ:
            return "killed", line, f"file-size limit ({limits.disk_mb} MiB) exceeded (SIGXFSZ)"
        why = f"killed by {res.signal_name}"
        if hit:
            why += f": {hit}"
        elif -rc == signal.SIGKILL:
            why += " (out of memory, or killed from outside)"
        return "killed", line, why
    last = _last_line(res.stderr) or _last_line(res.stdout) or f"exit status {rc}"
    if hit:
        last = f"{hit}: {last}"
    elif any(sign in output for sign in _MEMORY_SIGNS) and limits.memory_mb:
        last = f"memory limit ({limits.memory_mb} MiB) hit: {last}"
    return "fail", line, last
