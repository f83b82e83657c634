"""The base every kbase model derives from, the checks several models share, the tags of a skill
or a PR card, and `Problem`, what every check reports."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from kbase.closed_sets import NAME_RE, canonicalize


def check_kebab(v: str) -> str:
    if not NAME_RE.match(v):
        raise ValueError("name must be kebab-case: lowercase letters, digits and single hyphens")
    return v


# A name that is a path component too: skills/<name>/, pr_archive/<name>/
Kebab = Annotated[str, AfterValidator(check_kebab)]


def check_url(v: str, what: str = "source") -> str:
    if not re.match(r"^https?://\S+$", v):
        raise ValueError(f"{what} is not an http(s) URL: {v!r}")
    return v


class Model(BaseModel):
    """The base of every model here: each builds its validator when first used, not when its
    module is imported (building all of them cost ~0.1 s of every CLI start-up; a command uses a
    few)."""

    model_config = ConfigDict(defer_build=True)


class StrictModel(Model):
    """Hand-written input (front-matter): unknown keys are errors, text is stripped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Tags(StrictModel):
    languages: list[str] = Field(default_factory=list)
    kernel_types: list[str] = Field(default_factory=list)
    archs: list[str] = Field(default_factory=list)
    techniques: list[str] = Field(default_factory=list)

    @field_validator("*")  # every field is a tag key with its values in vocab.yaml
    @classmethod
    def _canonical(cls, v: list[str], info) -> list[str]:
        return canonicalize(info.field_name, v)

    def flat(self) -> list[str]:
        return [f"{k}={v}" for k in TAG_KEYS for v in getattr(self, k)]


# The tag keys are the fields of Tags (a new key: a field here and its values in vocab.yaml).
TAG_KEYS: tuple[str, ...] = tuple(Tags.model_fields)


class Problem(Model):
    """A problem with a location a human can jump to; `--json` always prints these five keys.

    `code` is a short kebab-case kind (`unbacked-number`, `duplicate-key`) when a tool should be
    able to tell problems apart without parsing the message."""

    path: str
    line: int = 0
    field: str | None = None
    code: str | None = None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        tag = self.code or self.field
        return f"{where}: [{tag}] {self.message}" if tag else f"{where}: {self.message}"
