"""Query understanding and the answer fields of issue #25: a pasted log becomes its error lines,
API names and symptom cues add the concepts they stand for (kbase/data/api_aliases.yaml), and a
search answers a confidence per hit, `no_good_match` and a compact candidate list, on the shipped
skills."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, run_cli
from kbase.retrieval import query as AA
from kbase.retrieval.query import distill, plan

from kbase.api import KnowledgeBase
from kbase.api_search import CANDIDATES
from kbase.data import read_yaml

P = "ERROR 07-24 11:08:41 [core.py:636] "  # vLLM's log prefix, on every line of the paste
VLLM_LOG = "\n".join(
    P + line
    for line in (
        "Traceback (most recent call last):",
        '  File "/root/vllm/vllm/model_executor/layers/fused_moe/layer.py", line 1405, in forward',
        "    return torch.ops.vllm.moe_forward(hidden_states, router_logits,",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/usr/lib/python3/dist-packages/triton/runtime/jit.py", line 419, in <lambda>',
        "    fused_moe_kernel[grid](",
        "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
        "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
    )
)


def test_a_pasted_log_becomes_its_error_lines_and_names():
    got = distill(VLLM_LOG)
    assert "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered" in got
    assert got.count("illegal memory access") == 1  # a repeated line counts once
    for noise in ('File "', "^^^", "ERROR 07-24", "core.py:636", "site-packages"):
        assert noise not in got, noise
    short = "fp32 tl.dot is less accurate than torch"
    assert distill(short) == short  # what a person typed passes through


def test_api_names_and_symptom_cues_add_their_concepts():
    p = plan("flash_attn_varlen_func RuntimeError: shape '[3, 3, 3, 64]' is invalid")
    assert "cu_seqlens" in p.lexical and "cu_seqlens" in p.dense
    assert AA.concepts_for("torch.ops.vllm.fused_moe crashed") == AA.concepts_for("fused_moe")
    assert AA.concepts_for("RMSNorm backward") and not AA.concepts_for("rmsnorm backward")
    cued = AA.concepts_for("NaN for shapes 1536 x 1560, fine when the dims are divisible by 64")
    assert any("mask" in c for c in cued)
    assert AA.concepts_for("illegal memory access once the batch has more than 65536 tokens")
    assert not AA.concepts_for("fused add rmsnorm kernel")
    # v2: names from the libraries' API docs; names every kernel paste has map to nothing
    assert "misaligned" in " ".join(AA.concepts_for("Status::kErrorMisalignedOperand"))
    assert "alignment" in " ".join(AA.concepts_for("gemm_op.can_implement(args) fails"))
    assert "indptr" in " ".join(AA.concepts_for("wrapper.plan(qo_indptr, paged_kv_indptr, ...)"))
    assert "output code" in " ".join(AA.concepts_for("torch._inductor.config.max_autotune=True"))
    assert not AA.concepts_for("x = tl.load(ptr + offs); BLOCK: tl.constexpr; for i in tl.range(n)")


def test_alias_table_is_versioned_and_speaks_the_skills_words():
    data = read_yaml("api_aliases.yaml")
    assert isinstance(data["version"], int) and data["aliases"] and data["cues"]
    corpus = " ".join(p.read_text(encoding="utf-8").lower() for p in REPO.glob("skills/*/SKILL.md"))
    words = set(re.findall(r"[a-z0-9_\-]+", corpus))
    seen: set[str] = set()
    for item in data["aliases"] + data["cues"]:
        missing = [w for w in item["concepts"].lower().split() if w not in words]
        assert not missing, (item["concepts"], missing)  # a concept no skill uses finds nothing
        for name in item.get("names", []):
            assert name.lower() not in seen, f"{name} listed twice"
            seen.add(name.lower())
        if "pattern" in item:
            re.compile(item["pattern"])


@pytest.fixture(scope="module")
def real_kb(skills_index, tmp_path_factory):
    home = skills_index.copy_home(tmp_path_factory.mktemp("qu-home") / "home")
    return KnowledgeBase(root=skills_index.root, home=home)


def _ask(kb, query: str):
    from kbase.schema import SearchQuery

    return kb.query(SearchQuery.parse(query=query, k=3, kind="skill"))


def test_an_error_line_is_matched_to_the_trigger_it_repeats(real_kb):
    res = _ask(real_kb, "triton.runtime.errors.OutOfResources: out of resource: shared memory")
    assert res.hits[0].id == "triton-num-stages-shared-memory-budget"
    assert not res.no_good_match
    top = res.candidates[0]
    assert top.id == res.hits[0].id and "OutOfResources" in (top.trigger or "")
    assert top.use_when and len(top.use_when) <= 170 and top.status
    assert all(0.0 <= h.confidence <= 1.0 for h in res.hits)
    assert res.hits[0].confidence == max(h.confidence for h in res.hits)
    assert 3 <= len(res.candidates) <= CANDIDATES
    assert len(json.dumps([c.model_dump(mode="json") for c in res.candidates])) < 6000


def test_the_mcp_default_budget_keeps_every_candidate_id(real_kb):
    """MCP fits the answer in max_chars by cutting candidate lines before dropping any: at the
    default budget an agent still sees all CANDIDATES ids, with a use-when line for each."""
    from kbase.schema import SearchQuery
    from kbase.serve import mcp_tools as A
    from kbase.serve.mcp_tools import compact_hit
    from kbase.serve.params import DEFAULT_MAX_CHARS

    q = "RuntimeError: CUDA error: an illegal memory access was encountered in my Triton kernel"
    res = real_kb.query(SearchQuery.parse(query=q, k=5))
    assert len(res.candidates) == CANDIDATES
    data = {
        "query": res.query,
        "env": None,
        "no_good_match": res.no_good_match,
        "hits": [compact_hit(h) for h in res.hits],
        "candidates": [c.model_dump(mode="json") for c in res.candidates],
    }
    out = A.fit_search(data, DEFAULT_MAX_CHARS)
    assert len(A.dumps(out)) <= DEFAULT_MAX_CHARS
    assert [c["id"] for c in out["candidates"]] == [c.id for c in res.candidates]
    assert all(len(c["use_when"]) >= 40 for c in out["candidates"])


def test_a_question_nothing_covers_says_so(real_kb):
    res = _ask(real_kb, "how long should sourdough bread proof before baking in a dutch oven")
    assert res.hits and res.no_good_match


def test_cli_json_carries_the_new_fields(skills_index, tmp_path):
    home = skills_index.copy_home(tmp_path / "home")
    env = {"KBASE_HOME": str(home)}
    out = run_cli(
        "search", "tl.dot fp32 result differs from torch by 1e-3",
        "--root", str(skills_index.root), "--json", "-k", "2", env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["no_good_match"] is False and data["candidates"]
    assert {"id", "kind", "status", "use_when", "trigger", "confidence"} <= set(
        data["candidates"][0]
    )
    assert all(0.0 <= h["confidence"] <= 1.0 for h in data["hits"])


def test_idf_comes_from_the_index_postings(real_kb):
    import numpy as np

    lex = real_kb.searcher().index().lexical
    df = {t: int(lex.indptr[lex.vocab[t] + 1] - lex.indptr[lex.vocab[t]]) for t in ("kernel",)}
    n = lex.num_docs
    assert lex.idf("kernel") == pytest.approx(
        np.log(1 + (n - df["kernel"] + 0.5) / (df["kernel"] + 0.5))
    )
    assert lex.idf("jitfunction") > 2 * lex.idf("kernel")  # one skill's word vs everyone's
    assert lex.idf("sourdoughproofing") == 0.0  # a word no chunk has identifies nothing


def coverage(query: dict[str, float], line: frozenset[str], weight: float) -> float:
    """The definition fusion.add_features computes in numpy for every line at once: the idf sum
    of the question's words in the line over the line's idf sum plus two typical words."""
    from kbase.retrieval.fusion import PAD_IDF

    if not weight:
        return 0.0
    return sum(query[w] for w in line if w in query) / (weight + 2 * PAD_IDF)


def test_a_rare_error_word_outweighs_common_ones_in_trigger_coverage(real_kb):
    from kbase.retrieval import fusion as F

    idx = real_kb.searcher().index()
    f = F.facts(idx, idx.by_id["triton-kernel-as-torch-custom-op"])
    line = next(x for x in f.lines if "JITFunction" in x[0])

    def weighed(text: str) -> dict[str, float]:
        return {w: idx.lexical.idf(w) for w in F.words(text)}

    rare_q, common_q = "not a JITFunction", "triton kernel compile"
    # as many words shared with the line (jit, function, jitfunction), but the rare ones decide
    assert len(F.words(rare_q) & line[1]) == len(F.words(common_q) & line[1]) == 3
    rare = coverage(weighed(rare_q), line[1], line[2])
    assert rare > 1.5 * coverage(weighed(common_q), line[1], line[2])
    import numpy as np

    col = {f: i for i, f in enumerate(F.FEATURES)}
    X = np.zeros((1, len(F.FEATURES)))
    q = "AssertionError: kernel is not a JITFunction"
    matched = F.add_features(
        idx, q, [idx.by_id["triton-kernel-as-torch-custom-op"]], X, col, None, 0
    )
    assert matched == [line[0]] and 0 < X[0, col["trig_cover"]] < 1


@pytest.mark.parametrize(
    "q",
    [
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072",
        "NaN in attention output for fully masked rows with flash_attn_varlen_func",
        "illegal memory access once the batch has more than 65536 tokens",
        "how long should sourdough bread proof before baking in a dutch oven",
    ],
)
def test_batched_evidence_features_equal_the_per_line_definition(real_kb, q):
    """add_features scores every candidate's lines in numpy; per skill it must give what
    coverage() (above) gives line by line and the explained-words share (first best line on a
    tie)."""
    import numpy as np
    from kbase.retrieval import fusion as F

    idx = real_kb.searcher().index()
    order = [i for i in range(len(idx.entries)) if idx.kind[i] == "skill"]
    col = {f: i for i, f in enumerate(F.FEATURES)}
    X = np.zeros((len(order), len(F.FEATURES)))
    scores = idx.lexical.scores(q)
    top = float(scores.max())
    matched = F.add_features(idx, q, order, X, col, scores, top)
    qw = F.words(q)
    qidf = {w: idx.lexical.idf(w) for w in qw}
    for r, e in enumerate(order):
        f = F.facts(idx, e)
        best, text = 0.0, ""
        for line, toks, weight in f.lines:
            c = coverage(qidf, toks, weight)
            if c > best:
                best, text = c, line
        assert X[r, col["trig_cover"]] == pytest.approx(best, rel=1e-12, abs=1e-15)
        assert matched[r] == text
        assert X[r, col["explained"]] == len(qw & f.vocab) / len(qw)
        ident = float(scores[f.ident].max()) / top if f.ident.size and top > 0 else 0.0
        assert X[r, col["ident"]] == ident


def test_bm25_level_is_absolute_where_the_other_bm25_features_are_relative(real_kb):
    import numpy as np
    from kbase.retrieval import fusion as F
    from kbase.retrieval.fusion import words

    s = real_kb.searcher()
    idx = s.index()
    col = F.FEATURES.index("bm25_level")
    levels = {}
    for q in (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory",
        "how long should sourdough bread proof before baking in a dutch oven",
    ):
        qp = plan(q)
        mask = idx.entry_mask("skill", None, [], None, None)
        pool = s.pool(idx, qp, "skill", None, [], mask)
        raw, _ = s._bm25(idx, qp.lexical, idx.masked_chunks(mask))
        e, _, top = raw[0]
        nq = len(words(qp.lexical))
        row = pool.entries.index(e)
        assert pool.features[row, col] == pytest.approx(np.log1p(top) / np.log1p(nq))
        # the relative feature is 1 for the best BM25 candidate of any question
        assert pool.features[row, F.FEATURES.index("bm25")] == pytest.approx(1.0)
        levels[q[:6]] = pool.features[row, col]
    assert levels["triton"] > 1.5 * levels["how lo"]  # 1.29 vs 0.69 on the shipped skills


def test_skill_facts_are_stored_for_the_next_process(skills_index, tmp_path):
    """The facts a search makes (tokenized trigger and failure-mode lines) are stored beside the
    generation; the next reader uses them instead of making them again, with the same answer,
    and a damaged file is made anew."""
    import json

    from kbase.retrieval import fusion as F

    home = skills_index.copy_home(tmp_path / "home")
    q = "NaN in attention output for fully masked rows with flash_attn_varlen_func"

    def answer(kb):
        res = _ask(kb, q)
        return [(h.id, h.confidence) for h in res.hits], [c.trigger for c in res.candidates]

    first = KnowledgeBase(root=skills_index.root, home=home)
    want = answer(first)
    path = first.searcher().index().path / F.CACHE_FILE
    made = json.loads(path.read_text(encoding="utf-8"))
    assert made and all(set(r) == {"ident", "lines", "use_when", "vocab"} for r in made.values())
    second = KnowledgeBase(root=skills_index.root, home=home)
    assert answer(second) == want
    st = F.state(second.searcher().index())
    assert not st.fresh and set(made) <= set(st.stored)  # nothing was made again
    path.write_bytes(b'{"broken": ')
    third = KnowledgeBase(root=skills_index.root, home=home)
    assert answer(third) == want
    assert json.loads(path.read_text(encoding="utf-8")).keys() == made.keys()


def test_the_evidence_cache_is_the_same_bytes_whatever_the_hash_seed(skills_index, tmp_path):
    """A skill line's idf sum is added up in one order: summed over a set, its last digits
    (and so scores and the stored evidence file) changed with PYTHONHASHSEED."""
    import os
    import subprocess
    import sys

    q = "CUDA error: an illegal memory access was encountered in my Triton kernel"
    got = []
    for seed in ("1", "2"):
        home = skills_index.copy_home(tmp_path / f"home{seed}")
        env = {**os.environ, "PYTHONHASHSEED": seed, "KBASE_HOME": str(home)}
        cmd = [sys.executable, "-m", "kbase.cli", "search", q, "--json"]
        cmd += ["--root", str(skills_index.root)]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        (stored,) = home.rglob("evidence-1.json")
        got.append(stored.read_bytes())
    assert got[0] == got[1]
