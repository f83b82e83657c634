"""Symbol names from diff hunk headers and added definition lines, for the C-family files no
grammar reads (`.cl`, `.inc`, `.metal`; ingest/definitions.py parses the others).

Hunk headers carry whatever line git found above the change (`template <typename T>`,
`__global__ void __launch_bounds__(128) Kernel(...)`), so the name is dug out of that text and
checked against lists of words that are never the name of a definition: keywords, qualifiers,
builtin types and template parameter placeholders.
"""

from __future__ import annotations

import re

from kbase.ingest.definitions import C_FAMILY

# the C family's files no grammar reads, and the whole family
HEADER_ONLY = (".inc", ".cl", ".metal")
C_EXT = C_FAMILY + HEADER_ONLY

# keywords and qualifiers, builtin and standard type names, and namespaces that are never the
# definition itself
C_STOP = set(
    """
    alignas alignof asm auto bool break case catch char class const consteval constexpr
    constinit const_cast continue co_await co_return decltype default defined delete do double
    dynamic_cast else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept nullptr operator private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
    switch template this thread_local throw true try typedef typeid typename union unsigned
    using virtual void volatile while __global__ __device__ __host__ __forceinline__ __inline__
    __noinline__ __shared__ __constant__ __managed__ __launch_bounds__ __restrict__
    __grid_constant__ __attribute__ __declspec __cluster_dims__ CUTLASS_DEVICE
    CUTLASS_HOST_DEVICE CUTE_DEVICE CUTE_HOST_DEVICE CUTLASS_GLOBAL FLASHINFER_INLINE
    __host__device__ size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    half half2 nv_bfloat16 nv_bfloat162 float2 float4 dim3 std cute cutlass torch at c10
    """.split()
)
# template parameter placeholders: real code names things this way, but they are types, not
# definitions
_PLACEHOLDER = re.compile(
    r"^(?:[A-Z]\d?|Type|Types|DType\w*|IdType|scalar_t|index_t|T[A-Z]\w*_t|Args|Ts)$"
)

_IDENT = re.compile(r"^[A-Za-z_~][A-Za-z0-9_]*$")
_C_RECORD = re.compile(
    r"^(?:(?:typedef|export)\s+)?(?:struct|class|union|enum(?:\s+class|\s+struct)?)\s+"
    r"(?:(?:alignas|__align__|__attribute__)\s*\([^)]*\)\s*)*([A-Za-z_]\w*)\s*(?:final\s*)?(?:[:{<]|$)"
)
_C_DEFINE = re.compile(r"^#\s*define\s+([A-Za-z_]\w*)")
_C_CALLISH = re.compile(
    r"([A-Za-z_~]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*(?:<[^()<>;]*(?:<[^()<>;]*>[^()<>;]*)*>)?\s*\("
)
_C_SKIP_START = (
    "//", "/*", "*", "#include", "#pragma", "#if", "#else", "#endif", "#ifdef", "#ifndef",
    "#elif", "#undef", "namespace", "using ", "return", "case ", "public:", "private:",
    "protected:", "}", "{", "else", "if ", "if(", "for ", "for(", "while", "switch", "do ",
    'extern "C"',
)  # fmt: skip


def _strip_template(s: str) -> str:
    """Drop a leading `template <...>` (nested angle brackets included)."""
    while s.startswith("template"):
        i = s.find("<")
        if i < 0:
            return ""
        depth = 0
        for j in range(i, len(s)):
            if s[j] == "<":
                depth += 1
            elif s[j] == ">":
                depth -= 1
                if depth == 0:
                    s = s[j + 1 :].lstrip()
                    break
        else:
            return ""
    return s


def _good(name: str) -> bool:
    return bool(_IDENT.match(name)) and name not in C_STOP and not _PLACEHOLDER.match(name)


def c_symbol(text: str) -> str | None:
    s = text.strip()
    if not s or s.startswith(_C_SKIP_START):
        return None
    m = _C_DEFINE.match(s)
    if m:
        return m.group(1) if _good(m.group(1)) else None
    s = _strip_template(s)
    if not s:
        return None
    m = _C_RECORD.match(s)
    if m:
        return m.group(1) if _good(m.group(1)) else None
    head = s.split("{", 1)[0]
    for m in _C_CALLISH.finditer(head):
        parts = [p.strip() for p in m.group(1).split("::")]
        last = parts[-1].lstrip("~")
        if not _good(last):
            continue
        parts = [p for p in parts if p not in C_STOP or p == parts[-1]]
        return "::".join(parts)
    return None


def added_definition(line: str) -> str | None:
    """A definition introduced by an added line (without its leading '+'), if it looks like one:
    definitions start at column 0 and are not statements. Cheap filters first: this runs on
    every added line of such files."""
    if (
        not line
        or line[0] in " \t#/*}{)"
        or "(" not in line
        and not line.startswith(("struct ", "class ", "template"))
    ):
        return None
    if line.rstrip().endswith((";", ",")):
        return None
    return c_symbol(line)
