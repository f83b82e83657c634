"""Which cached card a commit's facts made: a re-mine (`--full`, a recipe tried again, another
branch into the same root) reads the card built before instead of building it again.

A card depends on the commit's facts, the recipe and the code that builds and validates
cards (with the tag vocabulary); the key holds a digest of the first two, the cache's
`cards` version a digest of the third, so an edit to any of them misses.
"""

from __future__ import annotations

import hashlib
import platform
from functools import cache

from kbase.schema import Recipe

# the modules whose code shapes a card built from commit facts
_CARD_CODE = (
    "kbase.ingest.card_build",
    "kbase.ingest.classify",
    "kbase.ingest.bodies",
    "kbase.ingest.change_symbols",
    "kbase.schema",
    "kbase.vocab",
    "kbase.closed_sets",
    "kbase.globs",
    "kbase.search_query",
)


@cache
def card_version() -> str:
    from pydantic.version import VERSION  # its distribution's version, without importlib.metadata

    from kbase.code_digest import source_digest

    # the regex engine and pydantic's validators are part of the code too
    versions = f"python={platform.python_version()};pydantic={VERSION};"
    return source_digest(_CARD_CODE, ["vocab.yaml"], prefix=versions, length=20)


def recipe_key(recipe: Recipe) -> str:
    return hashlib.sha256(recipe.model_dump_json().encode()).hexdigest()[:16]


def card_key(packed_commit: tuple, recipe: str) -> str:
    """`packed_commit`: logrun.pack_commit of the facts; `recipe`: `recipe_key`. The facts are
    digested through repr, which (unlike marshal) writes equal values as equal bytes. The card
    code's version is digested too: the `cards` version row empties the table when it changes,
    but the cache is written without fsync, so after a power cut an old row could come back."""
    text = repr(packed_commit).encode("utf-8", "backslashreplace") + card_version().encode()
    digest = hashlib.blake2b(text, digest_size=16).hexdigest()
    return f"{packed_commit[0]}:{recipe}:{digest}"
