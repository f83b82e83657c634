"""Text reports of runs and statuses: JUnit XML for CI, Markdown for issues and job summaries."""

from __future__ import annotations

import datetime as dt
import html
import re
from xml.etree import ElementTree as ET

from kbase.validators.capture import printable

from kbase.closed_sets import STATUS_SPECS, VERDICT_SPECS, severity
from kbase.schema import Problem

_MD_SPECIAL = re.compile(r"[\\`*_\[\]|!#~]")


def _icon(status: str) -> str:
    spec = STATUS_SPECS.get(status)
    return spec.icon if spec else ""


def junit_xml(
    outcomes: list, problems: list[Problem], skill_paths: dict[str, str], suite: str = "kbase"
) -> str:
    """One testcase per skill x tier (and one per load problem), the shape CI test
    viewers expect.
    """
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=suite)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for o in outcomes:
        counts["tests"] += 1
        total_time += o.duration_s
        case = ET.SubElement(
            ts,
            "testcase",
            classname=f"skills.{o.skill}",
            name=o.tier,
            time=f"{o.duration_s:.3f}",
            file=skill_paths.get(o.skill, ""),
        )
        if o.line:
            case.set("line", str(o.line))
        where = f"{skill_paths.get(o.skill, o.skill)}:{o.line}: " if o.line else ""
        kind = VERDICT_SPECS[o.verdict].junit
        if kind == "skipped":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=o.message)
        elif kind in ("failure", "error"):
            counts["failures" if kind == "failure" else "errors"] += 1
            el = ET.SubElement(case, kind, message=where + o.message, type=o.verdict)
            el.text = o.output_tail
    for p in problems:
        counts["tests"] += 1
        counts["errors"] += 1
        case = ET.SubElement(ts, "testcase", classname="skills.lint", name=p.path)
        ET.SubElement(case, "error", message=str(p), type="lint")
    for k, v in counts.items():
        ts.set(k, str(v))
    ts.set("time", f"{total_time:.3f}")
    ts.set("timestamp", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _by_severity(item: tuple[str, int]) -> int:
    return severity(item[0])


def _cell(text: str) -> str:
    """Text from runs and rows (a snippet's output) as inert Markdown: no control characters,
    no HTML, no links, images or emphasis, and no cell break."""
    t = html.escape(printable(str(text)), quote=False)
    return _MD_SPECIAL.sub(r"\\\g<0>", t).replace("\n", " ")


def markdown_report(
    judgements: list[dict],
    outcomes: list,
    problems: list[Problem],
    *,
    generated: str,
    fingerprint: dict,
    isolation_note: str | None,
) -> str:
    counts: dict[str, int] = {}
    for j in judgements:
        counts[j["status"]] = counts.get(j["status"], 0) + 1
    lines = [f"# kbase audit — {generated}", ""]
    env = ", ".join(
        f"{k} {fingerprint[k]}"
        for k in ("python", "torch", "triton", "nvcc", "gpu_name", "compute_capability")
        if fingerprint.get(k)
    )
    lines += [f"Environment: {env}", ""]
    if isolation_note:
        lines += [f"> **Warning:** {isolation_note}", ""]
    lines.append(
        "Summary: "
        + ", ".join(f"{_icon(s)} {s}: {n}" for s, n in sorted(counts.items(), key=_by_severity))
    )
    lines += [
        "",
        "| skill | status | last pass | verified on | reasons |",
        "| --- | --- | --- | --- | --- |",
    ]
    for j in judgements:
        lines.append(
            f"| {_cell(j['skill'])} | {_icon(j['status'])} {j['status']} | "
            f"{_cell((j['last_pass'] or '—')[:10])} | {_cell(j['verified_on'] or '—')} | "
            f"{_cell('; '.join(j['reasons']))} |"
        )
    ran = [o for o in outcomes if o.executed]
    if ran:
        lines += [
            "",
            "## Runs",
            "",
            "| skill | tier | verdict | seconds | line | message |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for o in ran:
            lines.append(
                f"| {_cell(o.skill)} | {o.tier} | {o.verdict} | {o.duration_s:.1f} | "
                f"{o.line or ''} | {_cell(o.message[:200])} |"
            )
    if problems:
        lines += ["", "## Skills that do not load", ""] + [f"- `{_cell(str(p))}`" for p in problems]
    return "\n".join(lines) + "\n"
