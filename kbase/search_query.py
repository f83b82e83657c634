"""`SearchQuery`: one search's arguments, checked once (`parse`) for the API, CLI, HTTP and MCP
alike. It forgives what clients commonly send (`"5"` for 5, `"a=b,c=d"` for a tag list, `skills`
for `skill`) and refuses the rest with the accepted values spelled out."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbase.closed_sets import (
    ENTRY_STATUSES,
    KIND_ALIASES,
    KINDS,
    MODES,
    EntryKind,
    EntryStatus,
    Mode,
    canonical_value,
    vocabulary,
)
from kbase.errors import InvalidArgument, did_you_mean

MAX_QUERY_CHARS = 2000
MAX_K = 50
DEFAULT_K = 5
MAX_TAGS = 16
# An archive repo or family name: a path component, never a path (no "/" and no "..").
SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")


def check_int(name: str, v: Any, lo: int, hi: int, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, bool):
        raise ValueError(f"{name} must be an integer, got a boolean")
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d{1,9}\s*", v):
        v = int(v)  # "5" from a query string or a sloppy client
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int):
        raise ValueError(f"{name} must be an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}, got {v}")
    return v


def opt_str(name: str, v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"{name} must be a string, got {type(v).__name__}")
    return v.strip() or None


def one_of(name: str, v: str, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {v[:40]!r}")
    return v


def check_slug(name: str, v: Any, required: bool = False) -> str | None:
    v = opt_str(name, v)
    if v is None:
        if required:
            raise ValueError(f"{name} is required")
        return None
    if not SLUG_RE.match(v) or ".." in v:
        raise ValueError(
            f"{name} {v[:80]!r} is not a valid name (letters, digits, '.', '_', '+', '-'; "
            "at most 100 characters)"
        )
    return v


def str_list(name: str, v: Any, limit: int) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str) and v.strip().startswith("["):
        try:
            v = json.loads(v)  # some clients send a JSON list inside a string
        except ValueError:
            raise ValueError(f"{name} must be a list of strings") from None
    if isinstance(v, str):
        v = [s for s in re.split(r"[,\s]+", v) if s]  # "a=b,c=d" is a common shortcut
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{name} must be a list of strings")
    out = [x.strip() for x in v if x.strip()]
    if len(out) > limit:
        raise ValueError(f"at most {limit} {name} values, got {len(out)}")
    return out


# Tag keys of PR cards (ingest/cards.py) besides the vocabulary's; their values are open sets.
ARCHIVE_TAG_KEYS = ("family", "category", "repo")


def normalize_tag(tag: str) -> str:
    """`archs=hopper` as well as `archs=sm90`; an unknown key or value names the nearest ones."""
    if len(tag) > 100:
        raise ValueError("a tag is at most 100 characters")
    if "=" not in tag:
        raise ValueError(f"tag filter must look like key=value, got {tag[:100]!r}")
    key, value = (s.strip() for s in tag.split("=", 1))
    vocab = vocabulary()
    if key in ARCHIVE_TAG_KEYS:  # open sets: the search checks them against the index
        check_slug(key, value, required=True)
        return f"{key}={value}"
    if key not in vocab:
        keys = [*vocab, *ARCHIVE_TAG_KEYS]
        raise ValueError(f"unknown tag key {key[:40]!r}" + did_you_mean(key, keys, "tag keys"))
    canon = canonical_value(key, value)
    if canon is None:
        names = [*vocab[key]["values"], *vocab[key]["aliases"]]
        raise ValueError(
            f"unknown {key} value {value[:40]!r}" + did_you_mean(value, names, f"{key} values")
        )
    return f"{key}={canon}"


class SearchQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # as schema.Model

    query: str = Field(description="a symptom, an error message or a topic")
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="number of hits")
    kind: EntryKind | None = Field(None, description="skill or pr")
    repo: str | None = Field(None, description="only PR cards of this archive repo")
    tags: list[str] = Field(default_factory=list, description="key=value filters, all must hold")
    status: list[EntryStatus] = Field(default_factory=list, description="only these statuses")
    mode: Mode = Field("hybrid", description="hybrid, bm25 or dense")
    since: str | None = Field(None, description="only PR cards dated on or after YYYY-MM-DD")
    until: str | None = Field(None, description="only PR cards dated on or before YYYY-MM-DD")
    env: Literal["local"] | dict[str, Any] | None = Field(
        None,
        description="the environment statuses are judged for (fingerprint fields, or 'local'); "
        "None: no particular one, so stale-env is never reported",
    )

    @classmethod
    def parse(cls, **raw: Any) -> SearchQuery:
        """Validate; a bad value raises InvalidArgument naming the field."""
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            if err["type"] == "extra_forbidden":
                known = ", ".join(cls.model_fields)
                raise InvalidArgument(
                    f"unknown argument {field!r}; search takes {known}", field
                ) from None
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "missing":
                msg = "query is required: a symptom, an error message or a topic"
            elif not msg.startswith(str(field)):
                msg = f"{field}: {msg}"
            raise InvalidArgument(msg, field) from None

    @field_validator("query", mode="before")
    @classmethod
    def _query(cls, q: Any) -> str:
        if q is None:
            raise ValueError("query is required: a symptom, an error message or a topic")
        if not isinstance(q, str):
            raise ValueError(f"query must be a string, got {type(q).__name__}")
        if len(q) > MAX_QUERY_CHARS:
            raise ValueError(f"query is {len(q)} characters long; the limit is {MAX_QUERY_CHARS}")
        q = q.strip()
        if not q:
            raise ValueError("query is empty")
        if "\x00" in q:
            raise ValueError("query contains a NUL character")
        return q

    @field_validator("k", mode="before")
    @classmethod
    def _k(cls, v: Any) -> int:
        return check_int("k", v, 1, MAX_K, DEFAULT_K)

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, v: Any) -> str | None:
        v = opt_str("kind", v)
        return None if v is None else one_of("kind", KIND_ALIASES.get(v.lower(), v.lower()), KINDS)

    @field_validator("repo", mode="before")
    @classmethod
    def _repo(cls, v: Any) -> str | None:
        return check_slug("repo", v)

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: Any) -> list[str]:
        return [normalize_tag(t) for t in str_list("tags", v, MAX_TAGS)]

    @field_validator("status", mode="before")
    @classmethod
    def _status(cls, v: Any) -> list[str]:
        return [
            one_of("status", s, ENTRY_STATUSES) for s in str_list("status", v, len(ENTRY_STATUSES))
        ]

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: Any) -> str:
        return one_of("mode", opt_str("mode", v) or "hybrid", MODES)

    @field_validator("since", "until", mode="before")
    @classmethod
    def _day(cls, v: Any, info: Any) -> str | None:
        v = opt_str(info.field_name, v)
        with contextlib.suppress(ValueError):  # fromisoformat: not a real day
            if v is None or (re.fullmatch(r"\d{4}-\d{2}-\d{2}", v) and dt.date.fromisoformat(v)):
                return v
        raise ValueError(f"{info.field_name} must be a date like 2025-01-31, got {str(v)[:40]!r}")

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if v is not None and v != "local" and not isinstance(v, dict):
            raise ValueError("env must be 'local' or an object of fingerprint fields")
        return v
