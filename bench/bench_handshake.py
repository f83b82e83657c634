"""How soon the plugin's MCP server answers the handshake on a fresh root, under CPU load.

    python bench/bench_handshake.py                 # 0, 2, 4 busy loops; 5 starts each
    python bench/bench_handshake.py --busy 4 --runs 3

Each start is the plugin's own command (`kbase --default-root ROOT mcp`) on a copy of the
repository's tracked files with no index, as a fresh clone has it. Measured from spawning the
process to: the `initialize` answer (a legacy client, as Claude Code speaks), the `tools/list`
answer after it, and, with the mcp SDK's own client (mode "auto": `server/discover` first), the
end of its connect. Each with the early answers of kbase/serve/mcp_early.py and without them
(KBASE_MCP_EARLY=0: the SDK answers once it is imported), while N processes spin in a busy loop.
JSON in bench/results/handshake.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, percentile, write_result  # noqa: E402
from mcp_record import initialize_request  # noqa: E402

# the console script the plugin runs, next to this interpreter (a venv's), else the module
_SCRIPT = Path(sys.executable).with_name("kbase")
KBASE = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "kbase.cli"]
INIT = initialize_request("2025-06-18", {"name": "bench", "version": "0"})


def fresh_root(tmp: Path) -> Path:
    """A new copy for every start: a started server builds an index in its root."""
    tmp = Path(tempfile.mkdtemp(dir=tmp))
    files = subprocess.run(
        ["git", "ls-files", "-z", "skills", "pr_archive", ".claude-plugin"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        dst = tmp / os.fsdecode(name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes((REPO / os.fsdecode(name)).read_bytes())
    return tmp


def env(early: bool) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("KBASE_")}
    e["KBASE_MCP_EARLY"] = "1" if early else "0"
    return e


def raw_start(root: Path, early: bool) -> tuple[float, float]:
    """Seconds from spawn to the initialize answer and to the tools/list answer."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        KBASE + ["--default-root", str(root), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env(early),
        start_new_session=True,
    )
    assert p.stdin and p.stdout
    try:
        p.stdin.write(json.dumps(INIT).encode() + b"\n")
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["id"] == 1
        t_init = time.perf_counter() - t0
        for m in (
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ):
            p.stdin.write(json.dumps(m).encode() + b"\n")
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["id"] == 2
        return t_init, time.perf_counter() - t0
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # with the indexing child it started
        p.wait()


def sdk_start(root: Path, early: bool) -> float:
    """Seconds from spawn to the end of the mcp SDK client's connect (mode "auto")."""
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=KBASE[0], args=KBASE[1:] + ["--default-root", str(root), "mcp"], env=env(early)
    )

    async def main() -> float:
        t0 = time.perf_counter()
        async with Client(params, read_timeout_seconds=120) as c:
            took = time.perf_counter() - t0
            await c.list_tools()
        return took

    try:
        return anyio.run(main)
    finally:
        kill_leftovers(root)


def kill_leftovers(root: Path) -> None:
    """The `kbase index` child a server left building in `root` (found by its command line):
    it would load the next start."""
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if str(root).encode() in (d / "cmdline").read_bytes():
                os.kill(int(d.name), signal.SIGKILL)
        except OSError:
            continue


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 2, 4])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.busy:
            loops = busy_loops(n)
            try:
                time.sleep(1.0)  # let the loops reach full speed
                for early in (True, False):
                    init, tools, sdk = [], [], []
                    for _ in range(args.runs):
                        a, b = raw_start(fresh_root(Path(tmp)), early)
                        init.append(a)
                        tools.append(b)
                        sdk.append(sdk_start(fresh_root(Path(tmp)), early))
                    rows.append(
                        {
                            "busy_loops": n,
                            "early": early,
                            "load": os.getloadavg()[0],
                            "initialize_s": init,
                            "tools_list_s": tools,
                            "sdk_connect_s": sdk,
                        }
                    )
                    print(table_row(rows[-1]), file=sys.stderr)
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
    print(table(rows))
    out = write_result("handshake", {"cpus": os.cpu_count(), "runs": args.runs, "rows": rows})
    print(f"JSON: {out}", file=sys.stderr)


def _cell(xs: list[float]) -> str:
    return f"{percentile(xs, 50):.2f} / {max(xs):.2f}"


def table_row(r: dict) -> str:
    return (
        f"| {r['busy_loops']} | {r['load']:.1f} | {'on' if r['early'] else 'off'} | "
        f"{_cell(r['initialize_s'])} | {_cell(r['tools_list_s'])} | {_cell(r['sdk_connect_s'])} |"
    )


def table(rows: list[dict]) -> str:
    head = (
        "| busy loops | load (1 min) | early answers | `initialize` s (median / max) | "
        "`tools/list` s | SDK client connect s |\n| --- | --- | --- | --- | --- | --- |"
    )
    return "\n".join([head] + [table_row(r) for r in rows])


if __name__ == "__main__":
    main()
