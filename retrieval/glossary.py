"""Bilingual query expansion from kbase/data/glossary.yaml (EN <-> ZH GPU-kernel terms).

The embedding model is English-only and the corpus is written in English, so a Chinese
query is translated term by term before it reaches either index.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from kbase.data import read_yaml


@dataclass(frozen=True)
class Expansion:
    lexical: str  # original query plus English (and alias) terms, for BM25
    dense: str  # query with Chinese terms replaced by English, for the embedding model
    added: tuple[str, ...]


@functools.cache
def _tables() -> tuple[list[tuple[str, str]], dict[str, str]]:
    try:
        data = read_yaml("glossary.yaml") or {}
    except FileNotFoundError:
        return [], {}
    zh_pairs: list[tuple[str, str]] = []
    aliases: dict[str, str] = {}
    for item in data.get("terms", []):
        en = str(item["en"]).strip()
        for zh in item.get("zh") or []:
            zh_pairs.append((str(zh).strip(), en))
        for al in item.get("aliases") or []:
            aliases[str(al).strip().lower()] = en
    zh_pairs.sort(key=lambda p: -len(p[0]))  # longest match first: 共享内存 before 内存
    return zh_pairs, aliases


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")


def expand(query: str) -> Expansion:
    zh_pairs, aliases = _tables()
    added: list[str] = []
    dense = query
    if any("\u3400" <= ch <= "\u9fff" for ch in query):
        remaining = query
        for zh, en in zh_pairs:
            if zh and zh in remaining:
                remaining = remaining.replace(zh, " ")
                dense = dense.replace(zh, f" {en} ")
                if en not in added:
                    added.append(en)
    for w in _WORD.findall(query):
        alias = aliases.get(w.lower())
        if alias and alias not in added:
            added.append(alias)
    if added:
        # leftover CJK particles only add [UNK] noise to an English-only embedding model
        dense = re.sub(r"[\u3400-\u9fff\uff00-\uffef\u3000-\u303f]+", " ", dense)
    dense = re.sub(r"\s+", " ", dense).strip() or query
    lexical = query if not added else f"{query} {' '.join(added)}"
    return Expansion(lexical=lexical, dense=dense, added=tuple(added))
