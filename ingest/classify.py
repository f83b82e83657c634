"""Our PR classifier: categories, the reverted PR, and vocabulary tags, from the subject and paths.
Rules are deliberately plain (word patterns over the title, path facts over the files) so that a
card's categories can be explained by reading its title and file list."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from kbase.closed_sets import canonical_value
from kbase.schema import Tags

PR_SUFFIX = re.compile(r"\(#(\d+)\)\s*$")
MERGE_PR = re.compile(r"^Merge pull request #(\d+)\b")

CATEGORIES = tuple(
    "revert fix perf feature refactor quantization fusion docs ci test build release other".split()
)


def _words(patterns: dict[str, str]) -> list[tuple[str, re.Pattern[str]]]:
    """(name, pattern) rules, matched without regard to case (`_hits`), in the order given."""
    assert all(rx == rx.lower() for rx in patterns.values())  # `_hits` lowercases the text
    return [(name, re.compile(rx)) for name, rx in patterns.items()]


def _hits(rules: list[tuple[str, re.Pattern[str]]], text: str) -> list[str]:
    """The names of the rules that match `text` without regard to case, in rule order. ASCII
    text (nearly all) is lowercased once and searched case-sensitively, faster in SRE than re.I
    (tags and categories of the flash-attention and DeepGEMM replays' cards: 0.33 s -> 0.20 s
    CPU); other text is searched with re.I (Unicode case folding)."""
    if text.isascii():
        low = text.lower()
        return [name for name, rx in rules if rx.search(low)]
    return [name for name, rx in rules if re.search(rx.pattern, text, re.I)]


def _by_word(words: dict[str, str]) -> dict[str, str]:
    """{word: name} from {name: its words, space-separated}."""
    return {word: name for name, ws in words.items() for word in ws.split()}


# words in a title; order does not matter, a title may carry several categories
_TITLE_RULES = _words(
    {
        "fix": (
            r"\b(fix(es|ed|ing)?|bug(fix)?s?|hotfix|crash(es)?|wrong|incorrect|correct(ly|ness)?|"
            r"workaround|regression|nan|overflow|race|segfault|illegal memory|oom|typo)\b"
        ),
        "perf": (
            r"\b(perf(ormance)?|optimi[sz](e|es|ed|ation|ing)|speed(s|up|-up|ed)?|faster|accelerat\w*|"
            r"latency|throughput|efficien\w*|tun(e|ed|ing)|boost|reduce overhead|fast path|lower "
            r"overhead)\b"
        ),
        "feature": (
            r"\b(feat(ure)?s?|support(s|ed|ing)?|add(s|ed|ing)?|new|implement(s|ed|ation)?|enable[sd]?|"
            r"introduc(e|es|ed|ing))\b"
        ),
        "refactor": (
            r"\b(refactor\w*|clean(up|s|ed)?|simplif\w*|restructur\w*|renam(e|es|ed|ing)|"
            r"mov(e|es|ed|ing)|reorgani[sz]\w*|unif(y|ied|ies)|deprecat\w*|remove unused|tidy)\b"
        ),
        "quantization": (
            r"(quant\w*|\bawq\b|\bgptq\b|\bfp8\b|\bfp4\b|\bnvfp4\b|\bmxfp[48]?\b|\bint[48]\b|"
            r"\bw[48]a(8|16)\b|smooth ?quant|\bkv ?int[48]\b|\bu4\b|\bs4\b)"
        ),
        "fusion": r"\bfus(e|ed|es|ing|ion)\b",
        "docs": r"(\bdocs?\b|\bdocument\w*|\breadme\b|\btutorial|\bdocstring)",
        "ci": r"(\bci\b|\bworkflows?\b|github actions?|\bpre-commit\b|\blint(er|ing)?\b)",
        "test": r"(\btests?\b|\bunit ?tests?\b|\bunittests?\b|\bpytest\b|\btesting\b)",
        "build": (
            r"(\bbuild\b|\bcmake\w*|\bsetup\.py\b|\bwheels?\b|\bdocker\w*|\bdependenc\w*|"
            r"\brequirements\b|\bcompil(e|ation)\b)"
        ),
        "release": r"(\bbump\b.*\bversion\b|\brelease v?\d|\bv\d+\.\d+(\.\d+)?\b|^bump\b)",
    }
)
# bracketed or conventional-commit prefixes: "[Fix]", "fix(sampling):", "[Feature] ..."
_PREFIX = re.compile(r"^\s*(?:\[([^\]]+)\]|([a-z]+)(?:\([^)]*\))?!?:)", re.I)
_PREFIX_MAP = _by_word(
    {"fix": "fix bugfix bug hotfix", "feature": "feat feature features enhancement"}
    | {"perf": "perf performance", "docs": "docs doc", "test": "test tests"}
    | {"quantization": "quant quantization"}
    | {name: name for name in ("refactor", "ci", "build", "release", "revert")}
)

_REVERT_SUBJECT = re.compile(r"^\s*revert\b", re.I)
_REVERT_QUOTED = re.compile(r'revert(?:s|ed)?\s+"(.*)"', re.I)
_REVERT_NUMBER = re.compile(r"\brevert(?:s|ed|ing)?\s+(?:pr\s*)?#(\d+)", re.I)

_DOC_EXT = (".md", ".rst", ".txt", ".png", ".jpg", ".jpeg", ".svg", ".gif")


def pr_number(subject: str) -> tuple[int, str] | None:
    """(PR number, style) for a squash subject `... (#N)` or a merge `Merge pull request #N ...`."""
    if m := MERGE_PR.match(subject):
        return int(m.group(1)), "merge"
    if m := PR_SUFFIX.search(subject):
        return int(m.group(1)), "squash"
    return None


def reverted_pr(title: str) -> int | None:
    """The PR a revert undoes: `Revert "x (#12)" (#15)` gives 12."""
    if m := _REVERT_QUOTED.search(title):
        if inner := PR_SUFFIX.search(m.group(1).rstrip('"')):
            return int(inner.group(1))
        if nums := re.findall(r"#(\d+)", m.group(1)):
            return int(nums[-1])
    m = _REVERT_NUMBER.search(title)
    return int(m.group(1)) if m else None


@lru_cache(maxsize=1 << 16)  # a path is asked about card after card
def _is_doc(path: str) -> bool:
    low = path.lower()
    name = low.rsplit("/", 1)[-1]
    if name.endswith(".txt") and (
        name == "cmakelists.txt" or name.startswith(("requirements", "version"))
    ):
        return False
    return (
        low.startswith(("docs/", "doc/"))
        or "/docs/" in low
        or name.endswith(_DOC_EXT)
        or name.startswith(("readme", "license", "changelog"))
    )


@lru_cache(maxsize=1 << 16)  # a path is asked about card after card
def _is_ci(path: str) -> bool:
    return path.startswith(
        (".github/", ".gitlab", ".circleci/", ".buildkite/", "ci/", ".jenkins", "scripts/ci")
    ) or path in (".pre-commit-config.yaml", ".clang-format", ".flake8", ".pylintrc")


@lru_cache(maxsize=1 << 16)  # a path is asked about card after card
def _is_test(path: str) -> bool:
    parts = path.lower().split("/")
    return (
        any(p in ("tests", "test", "unittests", "autotest", "testing") for p in parts[:-1])
        or parts[-1].startswith("test_")
        or parts[-1].endswith(("_test.py", "_test.cc", "_test.cu"))
    )


def _is_version(path: str) -> bool:
    return path.split("/")[-1] in ("version.txt", "version.py", "_version.py")


# a category every path of a PR has
_PATH_RULES = (("docs", _is_doc), ("ci", _is_ci), ("test", _is_test), ("release", _is_version))


def categories(title: str, paths: list[str]) -> list[str]:
    """Our categories for a PR; 'other' when no rule fires."""
    found: set[str] = set()
    if m := _PREFIX.match(title):
        words = re.split(r"[\s,/|+&]+", (m.group(1) or m.group(2) or "").lower())
        found.update(_PREFIX_MAP[w] for w in words if w in _PREFIX_MAP)
    if _REVERT_SUBJECT.match(title) or _REVERT_QUOTED.search(title) or _REVERT_NUMBER.search(title):
        found.add("revert")
    found.update(_hits(_TITLE_RULES, title))
    found.update(cat for cat, rule in _PATH_RULES if paths and all(map(rule, paths)))
    if "revert" in found:
        # a revert's title quotes the reverted PR; its words describe that PR, not this one
        found &= {"revert", "quantization", "fusion", "docs", "ci", "test"}
    return [c for c in CATEGORIES if c in found] or ["other"]


# tags: kernel types, languages, architectures and techniques from the title and code paths
_KERNEL_WORDS = _words(
    {
        "attention": (
            r"(attn|attention|fmha|\bmla\b|_mla|mla_|prefill|pagedattention|paged_attention|"
            r"flash_?attn|flashattention|\bmha\b|\bgqa\b|\bmqa\b|\bkv.?cache|cascade|xqa)"
        ),
        "moe": r"(\bmoe\b|_moe|moe_|moe\b|\bexperts?\b|\bep_moe|fused_moe)",
        "gemm": r"(gemm|matmul|cublas|\bbmm\b|bmm_|grouped_mm|\bgemv\b|gemv|\bmm\b|_mm\b)",
        "norm": r"(rms_?norm|layer_?norm|\bnorm\b|_norm\b|norm_|group_?norm)",
        "rope": r"(\brope\b|rotary|pos_?enc|rope_|_rope|mrope)",
        "sampling": r"(sampling|sampler|top_?p\b|min_?p\b|multinomial)",
        "topk": r"(top_?k)",
        "softmax": r"(softmax)",
        "activation": r"(activation|\bsilu|gelu|swiglu|act_and_mul|silu_and_mul|\bact\b)",
        "quantization": (
            r"(quant|\bfp8\b|fp8_|_fp8|\bint4\b|\bint8\b|\bawq\b|\bgptq\b|fp4|mxfp|w8a8|w4a16)"
        ),
        "communication": (
            r"(all_?reduce|all_?gather|all_?to_?all|reduce_?scatter|\bnccl\b|custom_ar|"
            r"\bcomm\b|comm/|_comm|nvshmem|mnnvl)"
        ),
        "embedding": r"(embedding|\bembed\b)",
        "convolution": r"(conv1d|conv2d|conv3d|convolution)",
        "scan": r"(cumsum|prefix.sum|\bscan\b|selective_state|\bssm\b|mamba)",
        "sort": r"(\bsort\b|argsort|bitonic|radix)",
        "transpose": r"(transpose|permute)",
        "gemv": r"(gemv)",
    }
)
_LANG_EXT = {".py": "python", ".cu": "cuda-cpp", ".cuh": "cuda-cpp", ".c": "c"}
_LANG_EXT |= dict.fromkeys(".cc .cpp .cxx .hpp .hh .h".split(), "cpp")
_LANG_EXT |= {".ptx": "ptx", ".sass": "sass"}
_LANG_WORDS = _words(
    {"triton": r"triton(?!_backend|server)", "cute-dsl": r"cute_?dsl|cutedsl"}
    | {"cutlass": r"cutlass", "tilelang": r"tilelang", "ptx": r"\bptx\b|inline asm"}
)
_TECH_WORDS = _words(
    {
        "fusion": r"\bfus(e|ed|es|ing|ion)\b|fused_",
        "fp8": r"fp8",
        "tma": r"\btma\b|tma_",
        "warp-specialization": r"warp_?speciali[sz]",
        "cuda-graphs": r"cuda_?graphs?|cudagraph",
        "autotuning": r"autotun|tuning_config|tuner",
        "persistent-kernels": r"persistent",
        "wgmma": r"wgmma|\bgmma",
        "tensor-cores": r"tensor.?core|\bmma\b|mma_",
        "determinism": r"determinis",
        "bf16": r"bf16|bfloat16",
        "torch-compile": r"torch\.compile|torch_compile",
    }
)
_ARCH = re.compile(r"(?<![a-z0-9])sm_?(\d{2,3}a?)(?![0-9])", re.I)
_ARCH_NAMES = re.compile(
    r"\b(volta|turing|ampere|ada|hopper|blackwell|h100|h200|h800|h20|a100|b200|gb200|b100|l40|l4|rtx4090|rtx5090)\b",
    re.I,
)
_CODE_EXT = tuple(_LANG_EXT)


def tags(title: str, paths: Iterable[str]) -> Tags:
    """Vocabulary tags from the title and the code paths."""
    code = [p for p in paths if p.lower().endswith(_CODE_EXT) and not (_is_test(p) or _is_doc(p))]
    # directory and file names carry the signal; a 500-file vendor drop repeats the same few.
    # The text searched is the title and the words, one per line: no pattern matches a newline
    text = "\n".join((title, *dict.fromkeys(seg for p in code for seg in p.split("/"))))
    by_ext = (_LANG_EXT.get("." + p.rsplit(".", 1)[-1].lower()) for p in code)  # each ends in a key
    langs = list(dict.fromkeys(filter(None, (*by_ext, *_hits(_LANG_WORDS, text)))))
    found = [canonical_value("archs", "sm" + m.group(1).lower()) for m in _ARCH.finditer(text)]
    found += [canonical_value("archs", m.group(1).lower()) for m in _ARCH_NAMES.finditer(title)]
    kinds, techs = _hits(_KERNEL_WORDS, text), _hits(_TECH_WORDS, text)
    archs = list(dict.fromkeys(filter(None, found)))
    return Tags(languages=langs, kernel_types=kinds, archs=archs, techniques=techs)
