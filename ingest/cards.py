"""PR cards for the rest of kbase: the indexer's entries (`load_card_entries`) and the two
questions other parts ask of the archive, when was a path last touched (staleness,
`latest_touch`) and what is a family's timeline (`kbase history`).

The code lives in card_loader.py (finding and validating cards), card_entries.py (cards as
index entries) and card_history.py (staleness and timelines); its names are found here too.
"""

from __future__ import annotations

from kbase.ingest.card_entries import (
    FILES_PER_CHUNK,
    card_entry,
    card_label,
    entry_id,
    load_card_entries,
)
from kbase.ingest.card_history import CardFacts, card_facts, latest_touch, read_families, timeline
from kbase.ingest.card_loader import (
    ARCHIVE_DIR,
    CardProblems,
    LoadedCard,
    card_files,
    card_paths,
    load_card,
)

__all__ = [
    "ARCHIVE_DIR",
    "FILES_PER_CHUNK",
    "CardFacts",
    "CardProblems",
    "LoadedCard",
    "card_entry",
    "card_facts",
    "card_files",
    "card_label",
    "card_paths",
    "entry_id",
    "latest_touch",
    "load_card",
    "load_card_entries",
    "read_families",
    "timeline",
]
