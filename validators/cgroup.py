"""A cgroup per sandboxed run: memory and process count limited for the run as a whole.

Per-process rlimits let three 800 MiB processes through a 1 GiB limit; a cgroup counts them
together. cgroup v1 (separate `memory` and `pids` hierarchies) and v2 (one unified hierarchy)
are both handled; where neither is writable the run goes on with rlimits only and its ledger row
says so. The child joins the cgroup between fork and exec (`join_in_child`), so there is no window
in which it runs unlimited."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path(os.environ.get("KBASE_CGROUP_ROOT", "/sys/fs/cgroup"))
_V2_PARENT = "kbase"  # v2 fallback: <root>/kbase, a cgroup with no processes of its own


def _own_paths() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        if len(parts := line.split(":", 2)) == 3:
            for c in parts[1].split(",") if parts[1] else [""]:
                out[c] = parts[2]
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _events(path: Path) -> dict[str, int]:
    out = {}
    for line in _read(path).splitlines():
        k, _, v = line.partition(" ")
        if v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


def _state(pid: int) -> str:
    stat = _read(Path(f"/proc/{pid}/stat"))  # "pid (name) state ...": a name may hold ")"
    fields = stat.rsplit(")", 1)[1].split() if ")" in stat else []
    return fields[0] if fields else ""


@dataclass
class RunCgroup:
    """The cgroup directories of one run (one per v1 controller, or one v2 directory)."""

    version: str  # "v1" | "v2"
    dirs: dict[str, Path]  # "memory"/"pids" -> directory (v2: both point at the same one)
    memory_mb: int | None
    pids: int | None

    @classmethod
    def create(cls, memory_mb: int | None, pids: int | None) -> RunCgroup | None:
        """A fresh cgroup with the limits applied, or None when this machine does not let us."""
        if os.environ.get("KBASE_CGROUP", "auto") == "off":
            return None
        # our pid in the name: a later run can tell the cgroup of a kbase killed with SIGKILL
        token = f"kbase-run-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return cls._create_v2(token, memory_mb, pids)
        return cls._create_v1(token, memory_mb, pids)

    @classmethod
    def _create_v1(cls, token: str, memory_mb: int | None, pids: int | None) -> RunCgroup | None:
        own = _own_paths()
        dirs: dict[str, Path] = {}
        for ctrl in ("memory", "pids"):
            base = CGROUP_ROOT / ctrl / own.get(ctrl, "/").lstrip("/")
            if not base.is_dir():
                continue
            sweep_stale(base)
            with contextlib.suppress(OSError):
                (base / token).mkdir()
                dirs[ctrl] = base / token
        if not dirs:
            return None
        mem = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", None
        return cls("v1", dirs, None, None)._limit(memory_mb, pids, *mem)

    @classmethod
    def _create_v2(cls, token: str, memory_mb: int | None, pids: int | None) -> RunCgroup | None:
        own = _own_paths().get("", "/").lstrip("/")
        # Our own cgroup holds processes (us), so by the no-internal-process rule it can only
        # delegate controllers when it is the root; otherwise use <root>/kbase, which is empty.
        for parent in (CGROUP_ROOT / own, CGROUP_ROOT / _V2_PARENT):
            try:
                parent.mkdir(exist_ok=True)
                enabled = set(_read(parent / "cgroup.subtree_control").split())
                want = {"memory", "pids"} & set(_read(parent / "cgroup.controllers").split())
                if want - enabled:
                    (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in want))
                sweep_stale(parent)
                (d := parent / token).mkdir()
            except OSError:
                continue
            cg = cls("v2", {"memory": d, "pids": d}, None, None)
            if cg._limit(memory_mb, pids, "memory.max", "memory.swap.max", "0"):
                return cg
        return None

    def _limit(
        self, memory_mb: int | None, pids: int | None, mem: str, swap: str, swap_to: str | None
    ) -> RunCgroup | None:
        """Write the limits whose files exist (`swap` gets `swap_to`, or the memory limit); the
        cgroup, or None (removed) when no limit held. Those that did not stay None: the run's
        row says which held."""
        mem_dir, pids_dir = self.dirs.get("memory"), self.dirs.get("pids")
        with contextlib.suppress(OSError):
            if memory_mb and mem_dir is not None and (mem_dir / mem).exists():
                nbytes = str(memory_mb * 1024 * 1024)
                (mem_dir / mem).write_text(nbytes)
                if (mem_dir / swap).exists():  # otherwise the run could spill past it into swap
                    (mem_dir / swap).write_text(swap_to or nbytes)
                self.memory_mb = memory_mb
            if pids and pids_dir is not None and (pids_dir / "pids.max").exists():
                (pids_dir / "pids.max").write_text(str(pids))
                self.pids = pids
        if self.memory_mb is None and self.pids is None:
            self.remove()
            return None
        return self

    def procs_files(self) -> list[str]:
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def pids_inside(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files():
            found |= {int(x) for x in _read(Path(f)).split() if x.isdigit()}
        return found

    def kill_all(self) -> int:
        """SIGKILL whatever is left in the cgroup until it is empty; how many were alive (not those
        already exiting: zombies, or dying with their PID namespace)."""
        killed: set[int] = set()
        # bwrap's own init may still be on its way out; it is not something the snippet left
        alive = {
            p
            for p in self.pids_inside()
            if _state(p) not in ("Z", "X", "") and _read(Path(f"/proc/{p}/comm")).strip() != "bwrap"
        }
        kill_file = self.dirs["memory"] / "cgroup.kill" if self.version == "v2" else None
        for _ in range(200):
            pids = self.pids_inside()
            if not pids:
                break
            if kill_file is not None and kill_file.exists():
                try:
                    kill_file.write_text("1")
                except OSError:
                    kill_file = None
            sigkill(pids)
            killed |= pids
            time.sleep(0.001)
        return len(alive & killed)

    def memory_hit(self) -> bool:
        """The run reached its memory limit (the kernel refused or OOM-killed inside it)."""
        d = self.dirs.get("memory")
        if d is None or self.memory_mb is None:
            return False
        if self.version == "v2":
            ev = _events(d / "memory.events")
            return ev.get("oom_kill", 0) > 0 or ev.get("max", 0) > 0
        ev = _events(d / "memory.oom_control")
        failcnt = _read(d / "memory.failcnt").strip()
        return ev.get("oom_kill", 0) > 0 or (failcnt.isdigit() and int(failcnt) > 0)

    def pids_hit(self) -> bool:
        d = self.dirs.get("pids")
        if d is None or self.pids is None:
            return False
        return _events(d / "pids.events").get("max", 0) > 0

    def remove(self) -> None:
        for d in sorted(set(self.dirs.values()), reverse=True):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes still exiting
                    time.sleep(0.002)


_OWNED = re.compile(r"^kbase-run-(\d+)-")


def stale_runs(folder: Path) -> list[Path]:
    """The `kbase-run-<pid>-...` entries of `folder` (a run's cgroup or temp folder) whose kbase has
    exited: one killed with SIGKILL ran no clean-up."""
    gone = []
    for p in folder.glob("kbase-run-*"):
        try:
            if m := _OWNED.match(p.name):
                os.kill(int(m[1]), 0)
        except ProcessLookupError:
            gone.append(p)
        except (PermissionError, OverflowError):
            pass
    return gone


def sweep_stale(base: Path) -> None:
    """The cgroups of such runs: whatever still runs in them is killed, and they are removed."""
    for d in stale_runs(base):
        if d.is_dir():
            stale = RunCgroup("v1", {"d": d}, None, None)
            sigkill(stale.pids_inside())
            stale.remove()


def sigkill(pids: Iterable[int]) -> int:
    """SIGKILL each of `pids` that is still there and ours; how many were signalled."""
    sent = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            sent += 1
    return sent


def join_in_child(procs_files: list[str]) -> None:
    """Between fork and exec: move this (child) process into the run's cgroup(s)."""
    me = str(os.getpid())
    for f in procs_files:
        fd = os.open(f, os.O_WRONLY)
        try:
            os.write(fd, me.encode())
        finally:
            os.close(fd)
