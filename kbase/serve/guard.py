"""Transport guards for the HTTP servers (`kbase serve`, `kbase mcp --http`); each refusal and
its status is listed in docs/agents.md and answered as `{"error": {"status", "message"}}`.
`Guard` reads the whole body itself, counting bytes as they arrive (a chunked upload is cut off
like one with a Content-Length), and checks JSON depth on the bytes before anything recursive
parses them. `guarded_protocol` closes a connection whose headers are slow (uvicorn has a
keep-alive timeout but none for headers)."""

from __future__ import annotations

import json
import logging
import os
import re
from urllib.parse import unquote_to_bytes

from starlette.types import Message, Receive, Scope, Send

log = logging.getLogger("kbase.serve.guard")

# kbase's requests nest 3 levels, MCP's about 6; 10,000 `{"a":` made json.loads raise
# RecursionError (a 500)
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text opens more than `limit` arrays/objects at once (strings skipped)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", body)):
        depth += 1 if m.group() in b"[{" else -1
        if depth > limit:
            return True
    return False


def allowed_hosts(bind_host: str = "127.0.0.1") -> set[str]:
    """Host names (ports do not matter) a server bound to bind_host answers to: loopback names,
    the bind address when it is a specific one, and those KBASE_ALLOWED_HOSTS lists (e.g. the
    name a reverse proxy forwards: `KBASE_ALLOWED_HOSTS=kbase.internal,10.0.0.5`)."""
    names = {"127.0.0.1", "localhost", "::1"}
    if bind_host not in ("0.0.0.0", "::", ""):
        names.add(bind_host.strip("[]").lower())
    extra = os.environ.get("KBASE_ALLOWED_HOSTS", "").split(",")
    return names | {h.strip().strip("[]").lower() for h in extra if h.strip()}


def _hostname(value: str) -> str | None:
    """The name in a Host header or an Origin URL, lower-case, without port or brackets."""
    v = value.strip().lower().split("://", 1)[-1].split("/", 1)[0]
    if v.startswith("["):
        end = v.find("]")
        return v[1:end] if end > 0 else None
    name, _, port = v.partition(":")
    if port and not port.isdigit():
        return None
    return name or None


async def _respond(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"status": status, "message": message}}).encode()
    length = (b"content-length", str(len(body)).encode())
    headers = [(b"content-type", b"application/json"), length, (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    max_body = 64 * 1024
    body_timeout = 10.0

    def __init__(self, app, hosts: set[str], check_json: bool = True):
        self.app, self.hosts, self.check_json = app, hosts, check_json

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if _hostname(host) not in self.hosts:
            log.info("refused Host %r", host[:100])
            await _respond(send, 421, "this server does not answer to that Host header")
            return
        origin = headers.get("origin")
        if origin is not None and _hostname(origin) not in self.hosts:
            log.info("refused Origin %r", origin[:100])
            await _respond(send, 403, "cross-origin requests from that Origin are not allowed")
            return
        try:
            unquote_to_bytes(scope.get("query_string", b"").decode("latin-1")).decode("utf-8")
        except UnicodeDecodeError:
            await _respond(send, 400, "the query string is not valid UTF-8")
            return
        size = headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > self.max_body):
            await _respond(send, 413, f"request body larger than {self.max_body} bytes")
            return
        body, problem = await self._read_body(receive)
        if problem is not None:
            await _respond(send, *problem)
            return
        if body and json_too_deep(body):  # whatever the content type says: FastAPI may parse it
            await _respond(send, 400, f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
            return
        if body and self.check_json and "json" in headers.get("content-type", ""):
            try:
                # a lone surrogate (\ud800 escaped) decodes, and raises UnicodeEncodeError here
                json.dumps(json.loads(body.decode("utf-8")), ensure_ascii=False).encode("utf-8")
            except UnicodeError:
                await _respond(send, 400, "the body is not valid UTF-8 (or has a lone surrogate)")
                return
            except ValueError:
                pass  # not JSON at all: the app's own validation answers that
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, receive: Receive) -> tuple[bytes, tuple[int, str] | None]:
        import anyio

        chunks: list[bytes] = []
        total = 0
        try:
            with anyio.fail_after(self.body_timeout):
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return b"", (400, "client disconnected")
                    chunk = msg.get("body", b"")
                    total += len(chunk)
                    if total > self.max_body:
                        return b"", (413, f"request body larger than {self.max_body} bytes")
                    chunks.append(chunk)
                    if not msg.get("more_body", False):
                        return b"".join(chunks), None
        except TimeoutError:
            return b"", (408, f"the request body did not arrive within {self.body_timeout:g} s")


def _replay(body: bytes, receive: Receive) -> Receive:
    first: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        # later calls wait for the disconnect, as the server would give
        return first.pop() if first else await receive()

    return replay


def guarded_protocol(header_timeout: float = 10.0):
    """uvicorn's h11 protocol, closing connections whose request headers are too slow."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                self._arm()  # a new request is starting: its headers get the same deadline
            else:
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self.cycle is None or self.cycle.response_complete:
                    log.info("closed a connection whose request headers were too slow")
                    self.transport.close()

    return GuardedH11Protocol
