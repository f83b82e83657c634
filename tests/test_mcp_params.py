"""Argument checking shared by MCP and HTTP: what is accepted, and what each refusal says."""

from __future__ import annotations

import pytest

from kbase.errors import InvalidArgument
from kbase.schema import SearchQuery
from kbase.search_query import DEFAULT_K
from kbase.serve import params as P


def _q(**kw):
    return SearchQuery.parse(query="x", **kw)


def test_aliases_map_to_canonical_names_and_unknown_names_are_reported():
    assert P.apply_aliases("search", {"question": "x", "top_k": 3, "tag": "archs=sm90"}) == {
        "query": "x",
        "k": 3,
        "tags": "archs=sm90",
    }
    assert P.apply_aliases("search", {"query": "kept", "q": "dropped"})["query"] == "kept"
    with pytest.raises(InvalidArgument, match="'colour'.*search takes query"):
        P.apply_aliases("search", {"query": "x", "colour": "red"})
    with pytest.raises(InvalidArgument, match="JSON object"):
        P.apply_aliases("get", ["id"])


def test_lists_accept_json_strings_and_comma_lists_and_canonicalise_tags():
    assert _q(tags='["archs=hopper"]').tags == ["archs=sm90"]
    assert _q(tags="archs=H100, languages=triton").tags == ["archs=sm90", "languages=triton"]
    assert _q(status="verified,failing").status == ["verified", "failing"]
    with pytest.raises(InvalidArgument, match="list of strings"):
        _q(tags="[not json")
    with pytest.raises(InvalidArgument, match="at most 16"):
        _q(tags=[f"archs=sm{i}" for i in range(17)])


@pytest.mark.parametrize(
    "value, ok",
    [
        ("gpu-kernel-timing", True),
        ("pr:flashinfer#1234", True),
        ("pr:vllm.v1#7", True),
        ("../x", False),
        ("pr:flashinfer/../x#1", False),
        ("pr:#1", False),
        ("Gpu-Kernel", False),
        ("a" * 65, True),  # longer than a name can be: looked up, then "not found"
        ("a" * 121, False),
        ("x\x00y", False),
    ],
)
def test_ids(value, ok):
    if ok:
        assert P.check_id(value) == value
    else:
        with pytest.raises(InvalidArgument, match="invalid id"):
            P.check_id(value)


def test_numbers_and_query_limits():
    assert _q(k=None).k == DEFAULT_K and _q(k="7").k == 7 and _q(k=3.0).k == 3
    for bad in (True, "seven", 0, 51, 2.5):
        with pytest.raises(InvalidArgument, match="k must"):
            _q(k=bad)
    assert SearchQuery.parse(query="  warp  ").query == "warp"
    with pytest.raises(InvalidArgument, match="2001 characters long; the limit is 2000"):
        SearchQuery.parse(query="x" * 2001)
    with pytest.raises(InvalidArgument, match="NUL"):
        SearchQuery.parse(query="a\x00b")
