"""Serving benchmark: `kbase serve` under concurrent HTTP load, MCP over streamable HTTP under the
same number of concurrent sessions, MCP stdio search latency, and the same
load with the vectors in a Chroma server (team mode) instead of the embedded store.

    python bench/bench_serve.py                      # 32 clients x 50 queries; JSON in
    bench/results/serve.json
    python bench/bench_serve.py --clients 8 --queries 10   # a quick look

Servers are real subprocesses (`kbase serve`, `kbase mcp`, `chroma run`) on free loopback ports;
the clients run here. Queries are built from the skills' own trigger lines, and each client adds
its own variant words, so the server's query-embedding cache does not turn the run into a cache test
(`--repeat` runs a second pass with every client sending the same 50 queries, which the cache
helps).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, percentile, summary_ms, write_result  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console(stderr=True)
KBASE = shutil.which("kbase") or "kbase"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_root(tmp: Path) -> Path:
    root = tmp / "kb"
    shutil.copytree(REPO / "skills", root / "skills")
    if (REPO / "pr_archive").is_dir():
        shutil.copytree(REPO / "pr_archive", root / "pr_archive")
    return root


def queries(root: Path, n: int) -> list[str]:
    from kbase.ingest.markdown import DocumentError
    from kbase.ingest.skills import find_skill_files, load_skill

    out: list[str] = []
    for f in find_skill_files(root):
        try:
            s = load_skill(f, root)
        except DocumentError:
            continue
        out.extend(t[:200] for t in s.meta.trigger)
    out = sorted(set(out))
    return (out * (n // max(len(out), 1) + 1))[:n]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited early with {proc.returncode}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


async def _load(client, clients: int, lat: list[float], errors: list[str]) -> dict:
    """Run `clients` copies of client(i) at once; their latencies and errors, summarised."""
    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    return {
        **summary_ms(lat),
        "p99_ms": round(percentile([x * 1000 for x in lat], 99), 3),
        "requests": len(lat),
        "errors": len(errors),
        "error_samples": errors[:5],
        "wall_s": round(wall, 2),
        "throughput_qps": round(len(lat) / max(wall, 1e-9), 1),
    }


async def http_load(base: str, qs: list[str], clients: int, variant: bool) -> dict:
    import httpx

    lat: list[float] = []
    errors: list[str] = []

    async def client(i: int) -> None:
        async with httpx.AsyncClient(base_url=base, timeout=120) as c:
            for j in range(len(qs)):
                q = qs[(i + j) % len(qs)]
                if variant:
                    q = f"{q} variant {i} {j}"
                t = time.perf_counter()
                try:
                    r = await c.get("/search", params={"q": q, "k": 5})
                    ok = r.status_code == 200 and "hits" in r.json()
                except httpx.HTTPError as exc:
                    ok, r = False, exc
                lat.append(time.perf_counter() - t)
                if not ok:
                    errors.append(str(getattr(r, "status_code", r))[:200])

    return await _load(client, clients, lat, errors)


def serve_and_load(name: str, root: Path, home: Path, env: dict, qs, args, tmp: Path) -> dict:
    port = free_port()
    env = dict(env, KBASE_HOME=str(home))
    t0 = time.perf_counter()
    idx = subprocess.run(
        [KBASE, "index", "--root", str(root), "--json"], env=env, capture_output=True, text=True
    )
    index_s = time.perf_counter() - t0
    if idx.returncode not in (0, 1):
        raise SystemExit(f"kbase index failed: {idx.stderr[-2000:]}")
    proc = start(
        [KBASE, "serve", "--root", str(root), "--port", str(port), "--no-index"],
        env,
        tmp / f"{name}.log",
    )
    try:
        t1 = time.perf_counter()
        wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        startup = time.perf_counter() - t1
        res = {"index_s": round(index_s, 2), "startup_s": round(startup, 2)}
        # one unrecorded request per client first: connection set-up and first-touch costs are not
        # load
        asyncio.run(http_load(f"http://127.0.0.1:{port}", qs[:1], args.clients, True))
        res["distinct"] = asyncio.run(http_load(f"http://127.0.0.1:{port}", qs, args.clients, True))
        if args.repeat:
            res["repeated"] = asyncio.run(
                http_load(f"http://127.0.0.1:{port}", qs, args.clients, False)
            )
        return res
    finally:
        stop(proc)


def mcp_latency(root: Path, home: Path, env: dict, qs: list[str]) -> dict:
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=KBASE,
        args=["mcp", "--root", str(root), "--no-index", "--log-level", "warning"],
        env=dict(env, KBASE_HOME=str(home)),
    )

    async def main():
        lat = []
        t0 = time.perf_counter()
        async with Client(params, read_timeout_seconds=300) as c:
            startup = time.perf_counter() - t0
            await c.call_tool("search", {"query": "warm up"})
            for i, q in enumerate(qs):
                t = time.perf_counter()
                r = await c.call_tool("search", {"query": f"{q} mcp {i}", "k": 5})
                lat.append(time.perf_counter() - t)
                assert not r.is_error, r.content[0].text
        return {**summary_ms(lat), "startup_s": round(startup, 2)}

    return anyio.run(main)


async def mcp_http_load(url: str, qs: list[str], clients: int) -> dict:
    """`clients` MCP sessions over streamable HTTP at once, each calling search len(qs) times."""
    from mcp import Client

    lat: list[float] = []
    errors: list[str] = []

    async def client(i: int) -> None:
        try:
            async with Client(url) as c:
                for j in range(len(qs)):
                    q = f"{qs[(i + j) % len(qs)]} mcp {i} {j}"
                    t = time.perf_counter()
                    r = await c.call_tool("search", {"query": q, "k": 5})
                    lat.append(time.perf_counter() - t)
                    if r.is_error:
                        errors.append(r.content[0].text[:200])
        except Exception as exc:  # a broken session is an error, counted, not a crash
            errors.append(f"session {i}: {type(exc).__name__}: {str(exc)[:150]}")

    return await _load(client, clients, lat, errors)


def mcp_http(root: Path, home: Path, env: dict, qs: list[str], clients: int, tmp: Path) -> dict:
    port = free_port()
    proc = start(
        [KBASE, "mcp", "--root", str(root), "--no-index", "--http", f"127.0.0.1:{port}"],
        dict(env, KBASE_HOME=str(home)),
        tmp / "mcp-http.log",
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/mcp", proc)
        url = f"http://127.0.0.1:{port}/mcp"
        asyncio.run(mcp_http_load(url, qs[:1], clients))  # sessions and first touches
        return asyncio.run(mcp_http_load(url, qs, clients))
    finally:
        stop(proc)


def _load_cells(r: dict) -> list[str]:
    """A load run's table cells: p50, p95, p99, throughput, errors, requests."""
    ms = [f"{r[k]:.1f}" for k in ("p50_ms", "p95_ms", "p99_ms", "throughput_qps")]
    return [*ms, str(r["errors"]), str(r["requests"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--queries", type=int, default=50, help="queries per client")
    ap.add_argument(
        "--repeat", action="store_true", help="also run a pass with repeated (cacheable) queries"
    )
    ap.add_argument("--no-chroma", action="store_true", help="skip the Chroma server comparison")
    args = ap.parse_args()

    env = dict(os.environ, HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    env.pop("KBASE_CHROMA_URL", None)
    # Other work on the machine shows up as queueing here: record the load next to the figures.
    result: dict = {
        "clients": args.clients,
        "queries_per_client": args.queries,
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="kbase-bench-serve-") as t:
        tmp = Path(t)
        root = make_root(tmp)
        qs = queries(root, args.queries)
        console.print(
            f"root: {len(list((root / 'skills').iterdir()))} skills; {len(qs)} queries x "
            f"{args.clients} clients"
        )

        result["embedded"] = serve_and_load(
            "embedded", root, tmp / "home-embedded", env, qs, args, tmp
        )
        result["mcp_search"] = mcp_latency(root, tmp / "home-embedded", env, qs)
        result["mcp_http"] = mcp_http(root, tmp / "home-embedded", env, qs, args.clients, tmp)

        if not args.no_chroma:
            chroma = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
            cport = free_port()
            cproc = start(
                [
                    chroma,
                    "run",
                    "--path",
                    str(tmp / "chroma"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(cport),
                ],
                env,
                tmp / "chroma.log",
            )
            try:
                wait_http(f"http://127.0.0.1:{cport}/api/v2/heartbeat", cproc)
                cenv = dict(env, KBASE_CHROMA_URL=f"http://127.0.0.1:{cport}")
                result["chroma_server"] = serve_and_load(
                    "chroma", root, tmp / "home-chroma", cenv, qs, args, tmp
                )
            finally:
                stop(cproc)

    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    table = Table(
        title=f"kbase serve: {args.clients} clients x {args.queries} queries "
        f"(load average {result['loadavg_start'][0]} at start, {os.cpu_count()} CPUs)",
        title_justify="left",
    )
    for col in ("what", "p50 ms", "p95 ms", "p99 ms", "req/s", "errors", "n"):
        table.add_column(col, justify="right" if col != "what" else "left")
    for mode in ("embedded", "chroma_server"):
        for kind in ("distinct", "repeated"):
            r = result.get(mode, {}).get(kind)
            if r:
                table.add_row(f"HTTP {mode} ({kind})", *_load_cells(r))
    table.add_row(
        f"MCP search (streamable HTTP, {args.clients} sessions)", *_load_cells(result["mcp_http"])
    )
    m = result["mcp_search"]
    table.add_row(
        "MCP search (stdio, sequential)",
        f"{m['p50_ms']:.1f}",
        f"{m['p95_ms']:.1f}",
        "",
        "",
        "0",
        str(m["n"]),
    )
    Console(width=120).print(table)
    out = write_result("serve", result)
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
