"""Which commits of a range carry history worth a card, from the commit graph alone (no diffs):
the spine, PR merges and transport merges as docs/pr-archive.md "Mining" describes them."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbase.ingest import classify

GRAPH_FORMAT = "%H%x1f%P%x1f%s"


@dataclass
class Node:
    parents: list[str]
    pr: int | None  # the PR its subject names, if any


@dataclass
class Plan:
    """`mine`: the commits to stream, newest first; `role`: why each commit is (not) mined."""

    order: list[str]  # every commit of the range, newest first (topological)
    nodes: dict[str, Node]
    mine: list[str] = field(default_factory=list)
    role: dict[str, str] = field(default_factory=dict)  # spine | side | pr-internal | transport


def plan(order: list[str], nodes: dict[str, Node], head: str) -> Plan:
    """Decide the role of every commit in the range `order` (newest first) whose tip is `head`."""
    out = Plan(order=order, nodes=nodes)
    claimed: dict[str, str] = out.role

    def line(tip: str, role: str) -> None:
        chain: list[str] = []
        x: str | None = tip
        while x is not None and x in nodes and x not in claimed:
            claimed[x] = role
            chain.append(x)
            x = next(iter(nodes[x].parents), None)  # its first parent
        # oldest merge first: a commit reachable from two merges belongs to the older one, as
        # `git log P1..P2` of each merge would say
        for sha in reversed(chain):
            n = nodes[sha]
            if len(n.parents) < 2:
                continue
            if n.pr is not None:
                for p in n.parents[1:]:
                    _claim_all(p, nodes, claimed)
            else:
                claimed[sha] = "transport"
                for p in n.parents[1:]:
                    line(p, "side")

    line(head, "spine")
    # commits the walk never reached (a range whose tip is not `head`): mine them as side work
    for sha in order:
        claimed.setdefault(sha, "side")
    out.mine = [s for s in order if claimed[s] in ("spine", "side")]
    return out


def _claim_all(tip: str, nodes: dict[str, Node], claimed: dict[str, str]) -> None:
    stack = [tip]
    while stack:
        x = stack.pop()
        if x not in nodes or x in claimed:
            continue
        claimed[x] = "pr-internal"
        stack.extend(nodes[x].parents)


def read_plan(repo, rev_range: str, head: str) -> Plan:
    """`repo`: a GitRepo."""
    order: list[str] = []
    nodes: dict[str, Node] = {}
    for line in repo.run("log", "--topo-order", f"--format={GRAPH_FORMAT}", rev_range).splitlines():
        if not line.strip():
            continue
        sha, parents, subject = (line.split("\x1f", 2) + ["", ""])[:3]
        pr = classify.pr_number(subject)
        nodes[sha] = Node(parents.split(), pr[0] if pr else None)
        order.append(sha)
    return plan(order, nodes, head)
