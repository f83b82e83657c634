"""MCP resources (`kbase://skill/{name}`, `kbase://tags`, `kbase://glossary`) and the
`triage-error` prompt (docs/agents.md)."""

from __future__ import annotations

import json
from typing import Any

from kbase.data import read_yaml
from kbase.errors import KbaseError
from kbase.serve import params as P


def tag_vocabulary(kb: Any) -> dict[str, Any]:
    from kbase.search_query import ARCHIVE_TAG_KEYS
    from kbase.vocab import vocabulary

    archive: dict[str, list[str]] = {k: [] for k in ARCHIVE_TAG_KEYS}
    for t in sorted(kb.archive_tags()):
        key, _, value = t.partition("=")
        archive[key].append(value)
    return {
        "usage": "search tags=['key=value', ...]; all must hold; aliases map to canonical values",
        "keys": {
            k: {"values": spec["values"], "aliases": spec["aliases"]}
            for k, spec in vocabulary().items()
        },
        "archive_keys": archive,
    }


def register_extras(srv: Any, service: Any) -> None:
    from mcp.server.mcpserver.exceptions import ResourceError

    kb = service.kb

    @srv.resource(
        "kbase://skill/{name}",
        name="skill",
        title="A kbase skill (SKILL.md)",
        description="The SKILL.md of one skill, front-matter included, as its authors wrote it",
        mime_type="text/markdown",
    )
    def skill(name: str) -> str:
        try:
            doc = kb.get(P.check_id(name))
        except KbaseError as exc:
            raise ResourceError(str(exc)) from None
        if doc.kind != "skill":
            raise ResourceError(f"{name!r} is not a skill; read PR cards with the get tool")
        return (kb.root / doc.path).read_text(encoding="utf-8")

    for name, title, description, data in (
        ("tags", "Tag vocabulary", "Tag keys, canonical values and aliases for search filters",
         lambda: tag_vocabulary(kb)),
        ("glossary", "Glossary (English / Chinese)",
         "GPU-kernel terms with Chinese equivalents and aliases, as search expands them",
         lambda: read_yaml("glossary.yaml")),
    ):  # fmt: skip
        srv.resource(
            f"kbase://{name}",
            name=name,
            title=title,
            description=description,
            mime_type="application/json",
        )(_as_json(data))

    @srv.prompt(
        name="triage-error",
        title="Triage a GPU-kernel error",
        description="From an error message or symptom to a fix backed by a kbase entry",
    )
    def triage_error(error: str, context: str = "") -> str:
        where = f"\n\nContext: {context.strip()}" if context.strip() else ""
        return (
            "A GPU kernel fails with this error or symptom:\n\n"
            f"```text\n{error.strip()[:4000]}\n```{where}\n\n"
            "1. Call the kbase `search` tool with the literal error line plus your root-cause "
            "hypothesis (k=5); read its one-line `candidates` and pick by your own reading. "
            "`no_good_match: true` means kbase most likely has nothing for this.\n"
            "2. `get` the best hit, or the section its `more` names. Prefer `verified` entries; "
            "treat `failing`, `stale-*` and `draft` ones as leads to check.\n"
            "3. Explain the likely cause, then the fix, citing the entry id. If no entry fits, say "
            "so and reason from the error itself.\n"
            "4. Once the fix works, record it: `feedback` on the entry you used, or `propose` a "
            "draft if kbase had nothing (when the server allows writes)."
        )


def _as_json(data: Any) -> Any:
    def read() -> str:
        return json.dumps(data(), ensure_ascii=False)

    return read
