"""Issue #28, the sandbox: run as root, a snippet must still be an unprivileged user, every
writable mount has a size, the signing key is unreadable by any of its names, and no host socket
file answers. Real snippets in the real bubblewrap sandbox through the real runner."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import snippet_skill
from kbase.ingest.skills import load_skill
from kbase.validators import bwrap
from kbase.validators.runner import RunSettings, run_tier
from kbase.validators.sandbox import Limits, run_sandboxed


def run(tmp: Path, code: str, **kw):
    path = snippet_skill(tmp / "kb", "probe", textwrap.dedent(code).strip("\n"))
    return run_tier(
        load_skill(path, tmp / "kb"), "cpu-interpret", RunSettings(root=tmp / "kb", **kw)
    )


def test_every_writable_mount_is_sized(tmp_path):
    # files of 6 MiB (under RLIMIT_FSIZE) until the mount is full: at most disk_mb per mount
    out = run(
        tmp_path,
        """
        import os
        for d in ("/var/tmp", "/run", "/root", "/home", "/dev/shm", "/tmp", "."):
            total = 0
            try:
                for i in range(12):
                    with open(os.path.join(d, f"fill{i}"), "wb") as fh:
                        fh.write(b"x" * (6 << 20))
                    total += 6
            except OSError:
                pass
            print(d, total)
            assert total <= 16, (d, total)
        """,
        disk_mb=16,
    )
    assert out.verdict == "pass", out.output_tail


@pytest.mark.skipif(os.geteuid() != 0, reason="the root-only case")
def test_run_as_root_the_snippet_is_nobody_and_reads_no_root_only_file(tmp_path):
    out = run(
        tmp_path,
        """
        import os
        print("uid", os.getuid(), os.geteuid(), os.getgroups())
        assert os.getuid() != 0 and os.geteuid() != 0
        try:
            open("/etc/shadow", "rb").read()
        except PermissionError:
            pass
        else:
            raise AssertionError("/etc/shadow was readable")
        with open("tmp-write-check", "w") as fh:  # its own directory stays writable
            fh.write("ok")
        """,
    )
    assert out.verdict == "pass", out.output_tail
    assert out.limits["nproc_enforced"] is True


def test_the_signing_key_is_unreadable_through_a_hard_link(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    keys.mkdir()
    key = keys / "runner.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\nsecret-material\n-----END PRIVATE KEY-----\n")
    key.chmod(0o600)
    link = Path("/var/tmp") / f"kbase-link-{os.getpid()}"
    os.link(key, link)
    try:
        monkeypatch.setenv("KBASE_SIGNING_KEY", str(key))
        out = run(
            tmp_path,
            f"""
            data = b""
            try:
                data = open({str(link)!r}, "rb").read()
            except OSError as exc:
                print("refused", exc)
            assert b"secret-material" not in data
            """,
        )
    finally:
        link.unlink()
    # either the run refuses a key with several names, or it cannot read any of them
    assert out.verdict in ("pass", "error"), out.output_tail
    if out.verdict == "error":
        assert "hard link" in out.message


PROBE_SOCKET = """
import socket
a, b = socket.socketpair()  # still there: multiprocessing needs it
a.sendall(b"x"); assert b.recv(1) == b"x"
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect({path!r})
    s.sendall(b"escaped")
    print("CONNECTED")
except OSError as exc:
    print("refused", exc)
"""


@contextlib.contextmanager
def host_socket():
    """A world-connectable unix socket outside every masked folder; yields (path, bytes got)."""
    sock_dir = Path(os.environ.get("KBASE_ATTACK_DIR", Path(__file__).resolve().parents[1]))
    sock_dir = sock_dir / ".sandbox-tests"
    sock_dir.mkdir(exist_ok=True)
    path = sock_dir / f"host-{os.getpid()}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o777)  # world-connectable, as many agents' sockets are
    srv.listen(1)
    srv.settimeout(20)
    got: list[bytes] = []

    def accept() -> None:
        try:
            conn, _ = srv.accept()
            got.append(conn.recv(100))
            conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield str(path), got
    finally:
        srv.close()
        path.unlink()


def test_no_host_socket_file_answers(tmp_path):
    with host_socket() as (path, got):
        out = run(tmp_path, PROBE_SOCKET.format(path=path))
    assert out.verdict == "pass", out.output_tail
    assert not got and "CONNECTED" not in out.output_tail
    assert "refused" in out.output_tail


def test_no_host_socket_answers_where_unix_sockets_are_allowed(tmp_path):
    # the GPU tier's relaxed mode (a CUDA driver that needs socket(AF_UNIX) in cuInit): the
    # filter is off, so every host socket file the sandbox could see is covered instead
    with host_socket() as (path, got):
        bwrap.host_socket_files.cache_clear()  # scanned once per process: include this one
        res = run_sandboxed(
            [sys.executable, "-c", PROBE_SOCKET.format(path=path)],
            {},
            Limits(30),
            lambda w: {"HOME": w},
            hardening=(True, False),
        )
    assert res.returncode == 0, res.stderr
    assert res.limits["unix_sockets"] == "host files covered"
    assert not got and "CONNECTED" not in res.stdout
    assert "refused" in res.stdout  # a socket could be made; connecting to the host's could not


def test_a_host_socket_gone_since_the_scan_does_not_fail_the_run(tmp_path):
    # the scan is cached per process; a socket file that went away afterwards (another test's,
    # a daemon that stopped) cannot be covered, and must not fail the runs that follow
    def probe():
        return run_sandboxed(
            [sys.executable, "-c", "print('ran')"],
            {},
            Limits(30),
            lambda w: {"HOME": w},
            hardening=(True, False),
        )

    with host_socket() as (path, _):
        bwrap.host_socket_files.cache_clear()
        first = probe()  # scans while the socket exists (the test above: the scan finds it)
    assert not os.path.exists(path)
    before = bwrap.host_socket_files.cache_info()
    second = probe()
    after = bwrap.host_socket_files.cache_info()
    # the same scan, socket and all: a hit, not a new scan. Under xdist another worker's test
    # socket can vanish mid-run too; the retry then clears the cache, which restarts the counts
    # (fewer calls counted than before the probe), and the stale scan was still what ran first.
    restarted = after.hits + after.misses <= before.hits + before.misses
    assert after.hits > before.hits or restarted, (before, after)
    for res in (first, second):
        assert res.returncode == 0 and "ran" in res.stdout, res.stderr
