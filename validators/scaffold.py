"""`kbase new NAME`: a SKILL.md whose format is valid and whose sample snippet passes on
cpu-interpret as written. Lint flags its TODO placeholders and the sample snippet until they are
replaced (ingest/skills.py `_unfinished`): a scaffold is not a skill."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from kbase.errors import KbaseError
from kbase.schema import NAME_RE

TEMPLATE = """---
name: {name}
description: >-
  TODO one or two sentences: what this skill does and when an agent should reach for it.
trigger:
  - "TODO a symptom, situation or literal error message that should surface this skill"
steps:
  - "TODO the first thing to do"
  - "TODO the check that shows it worked"
failure_modes:
  - symptom: "TODO what the engineer sees"
    cause: "TODO why it happens"
    fix: "TODO what to change"
verification:
  tiers: [cpu-interpret, gpu]
  timeout_s: 120
  asserts: "the masked Triton kernel matches torch for a size that is not a multiple of BLOCK"
audit:
  date: {today}
  max_age_days: 180
tags:
  languages: [triton]
  kernel_types: [elementwise]
  archs: [any-gpu]
  techniques: [masking]
sources:
  - https://triton-lang.org/main/getting-started/tutorials/01-vector-add.html
  - https://triton-lang.org/main/python-api/triton.language.html
---
# {title}

## Why

TODO the mechanism, with numbers where you have them.

## Verification

The snippet runs in a fresh directory with `KBASE_TIER` set (`cpu-interpret` sets
`TRITON_INTERPRET=1`); exit 0 passes, exit 77 skips. Replace it with one that proves this
skill's claim, on random inputs, with explicit tolerances.

```python verify
import os

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the tail block must not touch memory past n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha, mask=mask)


device = "cuda" if os.environ.get("KBASE_TIER") == "gpu" else "cpu"
torch.manual_seed(0)
n, block = 1000, 256
x = torch.randn(n, device=device)
out = torch.empty_like(x)
scale_kernel[(triton.cdiv(n, block),)](x, out, n, 3.0, BLOCK=block)
torch.testing.assert_close(out, x * 3.0, rtol=1e-6, atol=1e-6)
print(f"ok: n={{n}} BLOCK={{block}} max_err={{(out - x * 3.0).abs().max().item():.2e}}")
```

## Notes

TODO links, version caveats, related skills.
"""


def sample_snippet() -> str:
    """The code of TEMPLATE's verification block, as a SKILL.md made from it holds it."""
    body = TEMPLATE.split("```python verify\n", 1)[1].split("```", 1)[0]
    return body.replace("{{", "{").replace("}}", "}").strip()


class ScaffoldError(KbaseError, ValueError):
    pass


def new_skill(root: Path, name: str, *, force: bool = False) -> Path:
    if not NAME_RE.match(name) or len(name) > 64:
        raise ScaffoldError(
            f"skill name {name!r} must be kebab-case (lowercase letters, digits, single hyphens), "
            "at most 64 characters"
        )
    folder = root / "skills" / name
    path = folder / "SKILL.md"
    if path.exists() and not force:
        raise ScaffoldError(f"{path.relative_to(root)} already exists (use --force to overwrite)")
    folder.mkdir(parents=True, exist_ok=True)
    title = name.replace("-", " ").capitalize()
    today = dt.date.today().isoformat()
    path.write_text(TEMPLATE.format(name=name, title=title, today=today), encoding="utf-8")
    return path
