"""`env`: the environment statuses are judged for (`stale-env` where a skill never passed), from
`local` or `triton=3.4,torch=2.8,cuda=12.8,arch=sm90` (-> fingerprint fields)."""

from __future__ import annotations

import re
from typing import Any

from kbase.errors import InvalidArgument, did_you_mean

ENV_KEYS = {
    "triton": "triton",
    "torch": "torch",
    "cuda": "torch_cuda",
    "torch_cuda": "torch_cuda",
    "arch": "compute_capability",
    "cc": "compute_capability",
    "compute_capability": "compute_capability",
}
LOCAL = ("local", "this-machine")
_VER = r"\d{1,3}(\.\d{1,4}){0,3}"
_ARCH = r"(sm_?\d{2,3}a?|\d{1,2}\.\d)"
_PAIR = rf"((triton|torch|cuda|torch_cuda)={_VER}|(arch|cc|compute_capability)={_ARCH})"
# Exactly what parse_env accepts as a string; the HTTP and MCP schemas publish it.
ENV_PATTERN = rf"^(local|this-machine|{_PAIR}(,{_PAIR})*)$"
ENV_HELP = (
    "judge statuses for this environment: 'local' (this machine) or comma-separated "
    "triton=X.Y, torch=X.Y, cuda=X.Y, arch=smNN or N.N (e.g. 'triton=3.4,torch=2.8,arch=sm90'); "
    "omitted: no particular environment"
)
_VERSION = re.compile(r"^\d{1,3}(\.\d{1,4}){0,3}([a-z0-9.+-]{0,20})$")


def _arch(value: str) -> str:
    v = value.strip().lower()
    if m := re.fullmatch(r"sm_?(\d{1,2})(\d)a?", v):
        return f"{m.group(1)}.{m.group(2)}"
    if re.fullmatch(r"\d{1,2}\.\d", v):
        return v
    raise InvalidArgument(f"env arch must look like sm90, sm_90 or 9.0, got {value[:40]!r}", "env")


def parse_env(value: Any) -> str | dict[str, str] | None:
    """None, 'local' or a dict of fingerprint fields; InvalidArgument naming what is wrong. A
    string must match ENV_PATTERN (the contract the schemas publish); a dict is read leniently."""
    if value is None:
        return None
    strict = isinstance(value, str)
    if isinstance(value, dict):
        items = [(str(k).strip().lower(), str(v).strip()) for k, v in value.items()]
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if text.lower() in LOCAL:
            return "local"
        if len(text) > 200:
            raise InvalidArgument("env is at most 200 characters", "env")
        items = []
        for part in text.split(","):
            if "=" not in part:
                raise InvalidArgument(
                    f"env must be 'local' or key=value pairs joined by ',', got {part[:40]!r}",
                    "env",
                )
            k, v = part.split("=", 1)
            items.append((k, v))
    else:
        raise InvalidArgument(
            "env must be a string such as 'local' or 'torch=2.8,arch=sm90'", "env"
        )
    out: dict[str, str] = {}
    for k, v in items:
        key = ENV_KEYS.get(k)
        if key is None:
            raise InvalidArgument(
                f"unknown env key {k[:40]!r}" + did_you_mean(k, ENV_KEYS, "env keys"), "env"
            )
        if key == "compute_capability":
            out[key] = _arch(v)
        elif re.fullmatch(_VER, v) if strict else _VERSION.match(v):
            out[key] = v
        else:
            raise InvalidArgument(f"env {k} must be a version like 2.8, got {v[:40]!r}", "env")
    if strict and not re.fullmatch(ENV_PATTERN, text):
        raise InvalidArgument(
            "env must look like 'triton=3.4,torch=2.8,cuda=12.8,arch=sm90' or 'local'", "env"
        )
    return out or None
