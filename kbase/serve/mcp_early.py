"""The stdio MCP server's handshake, answered from kbase/data/mcp_handshake.json before the MCP
SDK is imported (~0.8 s of CPU; issue #27); every line read is kept for the SDK, whose answers to
requests answered here are dropped. docs/agents.md has the measured figures. Only the standard
library is imported here: this runs before everything else."""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("kbase.serve.mcp")

RECORDED = Path(__file__).resolve().parents[1] / "data" / "mcp_handshake.json"
ENVELOPE = "io.modelcontextprotocol/protocolVersion"  # present only in 2026-07-28+ requests
ENVELOPE_KEYS = {ENVELOPE, "io.modelcontextprotocol/clientInfo"}
ENVELOPE_KEYS.add("io.modelcontextprotocol/clientCapabilities")


def log_to_stderr(level: str) -> None:
    """The servers log to stderr only: under MCP stdio, stdout belongs to the protocol."""
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def recorded_answers(allow_write: bool) -> dict[str, Any] | None:
    """The recorded answers for this mode, or None when they are not this server's: another
    kbase or MCP SDK version than the one they were recorded from, or KBASE_MCP_EARLY=0."""
    if os.environ.get("KBASE_MCP_EARLY", "1") == "0":
        return None
    try:
        rec = json.loads(RECORDED.read_text(encoding="utf-8"))
        from importlib.metadata import version

        import kbase

        if rec["kbase"] != kbase.__version__ or rec["mcp"] != version("mcp"):
            log.info("recorded handshake is for another kbase or mcp version: not used")
            return None
        return {**rec, **rec["write" if allow_write else "read"]}
    except (OSError, ValueError, KeyError, ImportError) as exc:
        log.info("no recorded handshake (%s): the SDK answers it", exc)
        return None


class EarlyAnswers:
    """Owns the protocol's file descriptors from start-up: fd 0 and fd 1 are pointed away (a
    native library's banner or a child process never touches the wire), a thread reads the
    client's lines into `lines` (None at EOF) and answers the handshake until hand_over()."""

    def __init__(self, allow_write: bool = False):
        sys.stdout.flush()
        self.wire_out = os.dup(1)
        os.dup2(2, 1)
        wire_in = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.answered: dict[str, dict] = {}  # json.dumps(id) -> the result sent
        self._lock = threading.Lock()
        self._live = True
        self._era: str | None = None  # "legacy" or "modern": the first request decides
        self._version: str | None = None  # negotiated by an initialize answered here
        self._allow_write = allow_write
        threading.Thread(target=self._read, args=(wire_in,), daemon=True, name="kbase-wire").start()

    def hand_over(self) -> dict[str, dict]:
        """Stop answering; the requests answered so far (their SDK answers are to be dropped)."""
        with self._lock:
            self._live = False
            return self.answered

    def _read(self, fd: int) -> None:
        answers = recorded_answers(self._allow_write)
        with open(fd, "rb") as wire:
            for raw in wire:
                line = raw.decode("utf-8", errors="replace")
                with self._lock:
                    if self._live and answers is not None:
                        try:
                            self._answer(line, answers)
                        except BrokenPipeError:  # the client left; the SDK's write ends it
                            answers = None
                        except Exception:  # noqa: BLE001  (the SDK answers the rest)
                            log.exception("early answers stopped")
                            answers = None
                    self.lines.put(line)
        self.lines.put(None)

    def _answer(self, line: str, rec: dict[str, Any]) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            return
        rid, method, params = msg.get("id"), msg.get("method"), msg.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            return
        if not isinstance(rid, (int, str)) or isinstance(rid, bool):
            return  # a notification, or an id the SDK refuses: never decides the era
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        enveloped = ENVELOPE in meta
        if self._era is None:  # as the SDK decides it (mcp.server.runner.serve_dual_era_loop)
            self._era = "modern" if enveloped and method != "initialize" else "legacy"
        result = None
        if self._era == "legacy" and not enveloped:
            if method == "initialize" and self._version is None and _initialize_ok(params):
                asked = params["protocolVersion"]
                self._version = asked if asked in rec["handshake_versions"] else rec["latest"]
                result = {"protocolVersion": self._version, **rec["initialize"]}
            elif method == "tools/list" and self._version and set(params) <= {"_meta"}:
                result = rec["tools/list"]
        elif self._era == "modern" and enveloped and set(params) == {"_meta"}:
            if meta[ENVELOPE] in rec["modern_versions"] and set(meta) == ENVELOPE_KEYS:
                if method in ("server/discover", "tools/list"):
                    result = rec["modern " + method]
        if result is not None:
            data = (json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n").encode()
            while data:
                data = data[os.write(self.wire_out, data) :]
            self.answered[json.dumps(rid)] = result
            log.debug("answered %s before the MCP SDK served", method)


def _initialize_ok(p: dict) -> bool:
    """The fields the SDK requires of `initialize`: else it answers, with an error."""
    info = p.get("clientInfo")
    info = info if isinstance(info, dict) else {}
    texts = (p.get("protocolVersion"), info.get("name"), info.get("version"))
    return isinstance(p.get("capabilities"), dict) and all(isinstance(t, str) for t in texts)
