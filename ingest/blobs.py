"""Blob contents from one long-running `git cat-file --batch`: each blob read on demand."""

from __future__ import annotations

import subprocess


class BlobReader:
    """Reads blobs by id; a blob the repository lacks (partial or damaged clone) reads as None."""

    def __init__(self, git_dir: str, max_bytes: int = 4 << 20):
        self.git_dir = git_dir
        self.max_bytes = max_bytes
        self._proc: subprocess.Popen[bytes] | None = None

    def read(self, sha: str) -> bytes | None:
        if not sha or set(sha) == {"0"}:
            return None
        if self._proc is None:
            self._proc = subprocess.Popen(
                ["git", f"--git-dir={self.git_dir}", "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(sha.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            return None
        size = int(header[2])
        data = proc.stdout.read(size)
        proc.stdout.read(1)  # the newline after the contents
        if header[1] != b"blob" or size > self.max_bytes:
            return None
        return data

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait()
            self._proc = None
