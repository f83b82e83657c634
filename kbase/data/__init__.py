"""Data files shipped with kbase (tag vocabulary, bilingual glossary)."""
