"""The agent-access commands on a machine without the server packages, and `kbase
serve` for real.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from serve_fixtures import free_port, wait_http

# Run the CLI with fastapi, uvicorn and mcp made unimportable (a GPU box that only verifies).
BLOCKED = """
import sys
for name in ("fastapi", "uvicorn", "mcp", "starlette"):
    sys.modules[name] = None
from kbase.cli import main
sys.argv = ["kbase"] + sys.argv[1:]
main()
"""


def _run_blocked(*args):
    return subprocess.run(
        [sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, timeout=120
    )


def test_cli_works_without_server_packages():
    # the servers are base dependencies; a box that only verifies may lack them all the same
    help_ = _run_blocked("--help")
    assert help_.returncode == 0 and "serve" in help_.stdout and "mcp" in help_.stdout
    assert _run_blocked("list", "--help").returncode == 0


def test_kbase_serve_subprocess_answers_on_loopback(indexed_root, tmp_path):
    httpx = pytest.importorskip("httpx")
    import shutil

    home = tmp_path / ".kbase"
    shutil.copytree(
        indexed_root.home, home
    )  # its own copy: one process per embedded Chroma directory
    port = free_port()
    env = dict(indexed_root.env(), KBASE_HOME=str(home))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kbase.cli",
            "serve",
            "--root",
            str(indexed_root.root),
            "--port",
            str(port),
            "--no-index",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120, proc=proc)
        name = indexed_root.names[0]
        r = httpx.get(
            f"http://127.0.0.1:{port}/search",
            params={"q": name.replace("-", " "), "k": 2},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["hits"][0]["id"] == name
        bad = httpx.get(f"http://127.0.0.1:{port}/entries/..%2Fsecrets", timeout=60)
        assert bad.status_code in (400, 404) and bad.json()["error"]["message"]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert out == b""  # the server prints nothing on stdout
    assert b"Traceback" not in err
