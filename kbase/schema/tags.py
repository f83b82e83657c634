"""The tags of a skill or a PR card: closed keys, each with its values in kbase/data/vocab.yaml."""

from __future__ import annotations

from pydantic import Field, field_validator

from kbase.schema.base import StrictModel


class Tags(StrictModel):
    languages: list[str] = Field(default_factory=list)
    kernel_types: list[str] = Field(default_factory=list)
    archs: list[str] = Field(default_factory=list)
    techniques: list[str] = Field(default_factory=list)

    @field_validator("*")  # every field is a tag key with its values in vocab.yaml
    @classmethod
    def _canonical(cls, v: list[str], info) -> list[str]:
        from kbase.vocab import canonicalize

        return canonicalize(info.field_name, v)

    def flat(self) -> list[str]:
        return [f"{k}={v}" for k in TAG_KEYS for v in getattr(self, k)]


# The tag keys are the fields of Tags (a new key: a field here and its values in vocab.yaml).
TAG_KEYS: tuple[str, ...] = tuple(Tags.model_fields)
