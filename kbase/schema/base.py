"""The base every kbase model derives from, and the checks several models share."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


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
