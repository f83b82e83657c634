"""Helpers for the agent-access tests (MCP, HTTP, export, team mode).

Real components only: a small knowledge-base root copied from the shipped skills, indexed once
per session; uvicorn servers on free loopback ports; a real `chroma run` server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Shipped skills the tests search for; the first ones that load are copied (others may be mid-edit).
PREFERRED = (
    "gpu-kernel-timing",
    "triton-dot-fp32-tf32-default",
    "cuda-check-launch-errors",
    "triton-masked-tail-pow2-block",
    "cuda-grid-stride-loop",
    "triton-deterministic-reduction",
)
N_SKILLS = 4


def synthetic_skill(name: str, topic: str, marker: str = "") -> str:
    """A tiny valid SKILL.md about `topic`; `marker` is a word only this skill contains."""
    from conftest import skill_text

    return skill_text(
        name,
        description=f"Synthetic test skill about {topic}. {marker}",
        trigger=f"{topic} {marker}",
        body=f"Because the {topic} matters. {marker}",
    )


def copy_skills(dest_root: Path, n: int = N_SKILLS) -> list[str]:
    from kbase.ingest.markdown import DocumentError
    from kbase.ingest.skills import SKILL_FILE, load_skill

    (dest_root / "skills").mkdir(parents=True, exist_ok=True)
    names = []
    candidates = list(PREFERRED) + sorted(p.name for p in (REPO / "skills").iterdir() if p.is_dir())
    for name in dict.fromkeys(candidates):
        src = REPO / "skills" / name
        if not (src / SKILL_FILE).exists():
            continue
        try:
            load_skill(src / SKILL_FILE, REPO)
        except DocumentError:
            continue
        shutil.copytree(src, dest_root / "skills" / name)
        names.append(name)
        if len(names) == n:
            break
    assert len(names) == n, "not enough loadable skills in skills/ to build the test root"
    return names


class IndexedRoot:
    def __init__(self, root: Path, home: Path, names: list[str]):
        self.root, self.home, self.names = root, home, names

    def kb(self):
        from kbase.api import KnowledgeBase

        return KnowledgeBase(root=self.root, home=self.home, chroma_url="")

    def env(self) -> dict:
        env = dict(
            os.environ,
            KBASE_HOME=str(self.home),
            KBASE_ROOT=str(self.root),
            HF_HUB_OFFLINE="1",
            ANONYMIZED_TELEMETRY="False",
        )
        env.pop("KBASE_CHROMA_URL", None)
        return env


# Test modules import these fixtures, and pytest then defines them once per module; the cache
# makes every module share one indexed root and one warmed-up service per session.
_SHARED: dict[str, object] = {}


@pytest.fixture(scope="session")
def indexed_root(tmp_path_factory) -> IndexedRoot:
    """4 shipped skills, indexed with the embedded vector store; shared by the serve tests."""
    from kbase.api import KnowledgeBase

    if "root" not in _SHARED:
        root = tmp_path_factory.mktemp("servekb")
        names = copy_skills(root)
        home = root / ".kbase"
        rep = KnowledgeBase(root=root, home=home, chroma_url="").index()
        assert rep.entries == len(names) and not rep.problems
        _SHARED["root"] = IndexedRoot(root, home, names)
    return _SHARED["root"]


@pytest.fixture(scope="session")
def service(indexed_root):
    from kbase.serve.service import Service

    if "service" not in _SHARED:
        svc = Service(indexed_root.kb())
        svc.prepare(index_if_missing=False, warm=True)
        _SHARED["service"] = svc
    return _SHARED["service"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedUvicorn:
    """A real uvicorn server on a free loopback port, run in a background thread."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def wait_http(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=1.0)
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


class ChromaServer:
    """`chroma run` on a free loopback port, or the server named by KBASE_TEST_CHROMA_URL."""

    def __init__(self, path: Path):
        self.path = path
        self.proc: subprocess.Popen | None = None
        self.url = os.environ.get("KBASE_TEST_CHROMA_URL") or ""

    def __enter__(self):
        if self.url:
            return self
        chroma = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
        port = free_port()
        self.log = open(self.path.parent / "chroma.log", "wb")
        self.proc = subprocess.Popen(
            [chroma, "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{port}"
        wait_http(self.url + "/api/v2/heartbeat", timeout=60, proc=self.proc)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.log.close()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    with ChromaServer(tmp_path_factory.mktemp("chroma") / "db") as srv:
        yield srv
