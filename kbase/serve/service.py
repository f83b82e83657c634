"""The read-only service behind `kbase mcp` and `kbase serve`.

One object per server process: it opens the knowledge base, builds the index once at start-up
if there is none, loads the embedding model once, and answers queries without ever indexing.
Both front ends call it; they only translate transport details (JSON-RPC, HTTP).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from typing import Any

from kbase.serve import params as P

log = logging.getLogger("kbase.serve")


class NotFound(LookupError):
    """The id (or section, or archive family) does not exist: a 404, not a server fault."""


class Unavailable(RuntimeError):
    """The server cannot answer right now (no index yet): a 503."""


@contextlib.contextmanager
def stdout_to_stderr():
    """Send anything written to fd 1 to stderr for the duration.

    Under MCP stdio, stdout is the protocol channel: a stray print or a native library's
    banner during start-up would corrupt the first frames the client reads.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


class Service:
    def __init__(self, kb):
        self.kb = kb
        self.started = time.time()

    # ------------------------------------------------------------------ start-up
    @classmethod
    def open(
        cls,
        root=None,
        home=None,
        chroma_url: str | None = None,
        index_if_missing: bool = True,
        warm: bool = True,
    ) -> Service:
        from kbase.api import KnowledgeBase

        kb = KnowledgeBase(root=root, home=home, chroma_url=chroma_url)
        svc = cls(kb)
        svc.prepare(index_if_missing=index_if_missing, warm=warm)
        return svc

    def prepare(self, index_if_missing: bool = True, warm: bool = True) -> None:
        """Index (only when there is no index at all) and warm up, before the first request."""
        t0 = time.perf_counter()
        if not self.kb.is_indexed() and index_if_missing:
            log.info("no index under %s: indexing %s before serving", self.kb.home, self.kb.root)
            rep = self.kb.index()
            for p in rep.problems:
                log.warning("%s", p)
        if warm and self.kb.is_indexed():
            self.kb.warm_up()
            self.kb.statuses()  # the validators cache the ledger on first use
        log.info(
            "kbase ready in %.1fs (root %s, home %s%s)",
            time.perf_counter() - t0,
            self.kb.root,
            self.kb.home,
            f", chroma {self.kb.settings.chroma_url}" if self.kb.settings.chroma_url else "",
        )

    # ------------------------------------------------------------------ queries
    def search(self, args: dict[str, Any]):
        """Full hits, as `kbase search --json` prints them. args come from params.search_args."""
        from kbase.api import NotIndexed

        try:
            return self.kb.search(
                args["query"],
                k=args["k"],
                kind=args["kind"],
                repo=args["repo"],
                tags=args["tags"] or None,
                status=args["status"] or None,
                mode=args.get("mode", "hybrid"),
                auto_index=False,
                since=args.get("since"),
                until=args.get("until"),
            )
        except NotIndexed as exc:
            raise Unavailable(str(exc)) from None
        except ValueError as exc:  # the API's own argument checks
            raise P.ParamError(str(exc)) from None

    def search_json(self, args: dict[str, Any]) -> dict:
        hits = self.search(args)
        return {"query": args["query"], "hits": [h.model_dump(mode="json") for h in hits]}

    def get(self, entry_id: str, section: str | None = None):
        from kbase.ingest.files import FileProblem
        from kbase.ingest.markdown import DocumentError

        try:
            return self.kb.get(entry_id, section=section)
        except KeyError as exc:
            raise NotFound(str(exc.args[0]) if exc.args else f"no entry {entry_id!r}") from None
        except (
            OSError,
            FileProblem,
            DocumentError,
        ) as exc:  # indexed, but the file went away or no longer reads
            log.warning("get %s: %s", entry_id, exc)
            raise NotFound(
                f"entry {entry_id!r} is indexed but its file cannot be read now; re-index"
            ) from None

    def stale(self) -> dict:
        """Skills that are not verified right now, worst first, with the validators' reasons."""
        try:
            from kbase.validators.status import skill_statuses
        except ImportError:
            return {
                "available": False,
                "message": "the validators are not installed here; no status is known",
                "skills": [],
            }
        try:
            statuses = skill_statuses(self.kb.root)
        except FileNotFoundError:
            statuses = {}
        order = {"failing": 0, "stale-source": 1, "stale-env": 2, "stale-age": 3, "unverified": 4}
        rows = [a for a in statuses.values() if a.status != "verified"]
        rows.sort(key=lambda a: (order.get(a.status, 9), a.skill))
        counts: dict[str, int] = {}
        for a in statuses.values():
            counts[a.status] = counts.get(a.status, 0) + 1
        return {
            "available": True,
            "total": len(statuses),
            "counts": counts,
            "skills": [a.model_dump(mode="json") for a in rows],
        }

    def history(self, repo: str, family: str) -> dict:
        """The timeline of one kernel family in one archived repo: the JSON of `kbase history --json`."""
        base = {"repo": repo, "family": family}
        try:
            from kbase.ingest.cards import read_families, timeline
        except ImportError:
            return {
                **base,
                "available": False,
                "message": "this kbase has no PR-archive module installed",
                "globs": [],
                "prs": [],
            }
        if not (self.kb.root / "pr_archive").is_dir():
            return {
                **base,
                "available": False,
                "message": "no PR archive under this root (pr_archive/ is missing)",
                "globs": [],
                "prs": [],
            }
        if not (self.kb.root / "pr_archive" / repo).is_dir():
            raise NotFound(f"no archive {repo!r} under pr_archive/")
        families = read_families(self.kb.root, repo)
        if family not in families:
            known = ", ".join(sorted(families)) or "none recorded"
            raise NotFound(f"unknown family {family!r} for {repo} (known: {known})")
        rows = timeline(self.kb.root, repo, family, families[family])
        return {**base, "available": True, "globs": list(families[family]), "prs": rows}

    def health(self) -> dict:
        from kbase.retrieval.generations import current_id

        return {
            "ok": self.kb.is_indexed(),
            "generation": current_id(self.kb.home),
            "chroma": "server" if self.kb.settings.chroma_url else "embedded",
            "uptime_s": round(time.time() - self.started, 1),
        }


# --------------------------------------------------------------------------- compact answers for agents


def where(path: str, line: int) -> str:
    return f"{path}:{line}" if line else path


def compact_hit(h) -> dict:
    """A hit trimmed to what an agent needs to decide whether to read more, and how."""
    d: dict[str, Any] = {"id": h.id, "title": h.title, "kind": h.kind, "status": h.status}
    if h.verified_on:
        d["verified_on"] = h.verified_on
    if h.verified_at:
        d["verified_at"] = h.verified_at
    if h.repo:
        d["repo"] = h.repo
    if h.pr is not None:
        d["pr"] = h.pr
    d["section"] = h.section
    d["snippet"] = h.snippet
    d["where"] = where(h.path, h.line)
    # "summary" is built from the front-matter, not a section get() can return: read the whole entry then.
    if h.section and h.section != "summary":
        d["more"] = {"tool": "get", "id": h.id, "section": h.section}
    else:
        d["more"] = {"tool": "get", "id": h.id}
    return d


def fit_hits(query: str, hits: list[dict], max_chars: int) -> str:
    """Serialise {"query", "hits"} within max_chars: shorten snippets first, then drop the lowest hits."""
    q = query if len(query) <= 120 else query[:120] + "…"

    def render(shown: list[dict], omitted: int) -> str:
        out: dict[str, Any] = {"query": q, "hits": shown}
        if omitted:
            out["truncated"] = {
                "omitted_hits": omitted,
                "hint": "raise max_chars or lower k, or call get on one id",
            }
        return dumps(out)

    for width in (None, 160, 80):
        shown = [dict(h, snippet=_cut(h["snippet"], width)) for h in hits]
        text = render(shown, 0)
        if len(text) <= max_chars:
            return text
    while shown:
        shown = shown[:-1]
        text = render(shown, len(hits) - len(shown))
        if len(text) <= max_chars:
            return text
    return render([], len(hits))


def _cut(s: str, width: int | None) -> str:
    if width is None or len(s) <= width:
        return s
    return s[:width].rstrip() + "…" if width else ""


def fit_entry(doc, max_chars: int) -> str:
    """An entry within max_chars: the text is cut at the budget and the section list tells what to ask for."""
    d = doc.model_dump(mode="json")
    d.pop("sections", None)
    d["sections"] = [s.title for s in doc.sections]
    text = d.pop("text", "")
    head = dumps({**d, "text": ""})
    room = max_chars - len(head) - 200
    if len(dumps(text)) <= max(room, 0) + 2:
        return dumps({**d, "text": text})
    cut = text[: max(room, 0)]
    while cut and len(dumps(cut)) > room:  # escapes make the JSON longer than the raw text
        cut = cut[: int(len(cut) * 0.9)]
    return dumps(
        {
            **d,
            "text": cut,
            "truncated": {
                "shown_chars": len(cut),
                "total_chars": len(text),
                "hint": "ask for one section, or raise max_chars",
            },
        }
    )


def fit_list(obj: dict, key: str, max_chars: int) -> str:
    """Drop items from the end of obj[key] until the JSON fits."""
    items = list(obj.get(key) or [])
    total = len(items)
    while True:
        out = dict(obj, **{key: items})
        if len(items) < total:
            out["truncated"] = {f"omitted_{key}": total - len(items), "hint": "raise max_chars"}
        text = dumps(out)
        if len(text) <= max_chars or not items:
            return text
        items = items[: max(0, min(len(items) - 1, int(len(items) * max_chars / len(text))))]
