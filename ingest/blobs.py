"""Blob contents from one long-running `git cat-file --batch`: each blob read once, on demand."""

from __future__ import annotations

import subprocess

NULL_SHA = "0" * 40


class BlobReader:
    """Reads blobs by id; a blob the repository lacks (partial or damaged clone) reads as None."""

    def __init__(self, git_dir: str, max_bytes: int = 4 << 20):
        self.git_dir = git_dir
        self.max_bytes = max_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self.reads = 0
        self.missing: list[str] = []

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                ["git", f"--git-dir={self.git_dir}", "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._proc

    def read(self, sha: str) -> bytes | None:
        if not sha or set(sha) == {"0"}:
            return None
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(sha.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            self.missing.append(sha)
            return None
        size = int(header[2])
        data = proc.stdout.read(size)
        proc.stdout.read(1)  # the newline after the contents
        self.reads += 1
        if header[1] != b"blob" or size > self.max_bytes:
            return None
        return data

    def read_many(self, shas: list[str]) -> dict[str, bytes | None]:
        """Several blobs in one round trip: all requests are written, then all answers read."""
        want = [s for s in dict.fromkeys(shas) if s and set(s) != {"0"}]
        if not want:
            return {}
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"".join(s.encode() + b"\n" for s in want))
        proc.stdin.flush()
        out: dict[str, bytes | None] = {}
        for sha in want:
            header = proc.stdout.readline().split()
            if len(header) < 3 or header[1] == b"missing":
                self.missing.append(sha)
                out[sha] = None
                continue
            size = int(header[2])
            data = proc.stdout.read(size)
            proc.stdout.read(1)
            self.reads += 1
            out[sha] = data if header[1] == b"blob" and size <= self.max_bytes else None
        return out

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait()
            self._proc = None
