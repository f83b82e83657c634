"""Text reports of runs and statuses: JUnit XML for CI, Markdown for issues and job summaries."""

from __future__ import annotations

import datetime as dt
from xml.etree import ElementTree as ET

STATUS_ICON = {
    "verified": "✅",
    "failing": "❌",
    "unverified": "⚪",
    "stale-age": "🕒",
    "stale-env": "🔄",
    "stale-source": "📝",
}


def junit_xml(
    outcomes: list, problems: list[str], skill_paths: dict[str, str], suite: str = "kbase"
) -> str:
    """One testcase per skill x tier (and one per load problem), the shape CI test viewers expect."""
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
        if o.verdict == "skip":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=o.message)
        elif o.verdict == "fail":
            counts["failures"] += 1
            el = ET.SubElement(case, "failure", message=where + o.message, type="fail")
            el.text = o.output_tail
        elif o.verdict != "pass":
            counts["errors"] += 1
            el = ET.SubElement(case, "error", message=where + o.message, type=o.verdict)
            el.text = o.output_tail
    for p in problems:
        counts["tests"] += 1
        counts["errors"] += 1
        case = ET.SubElement(ts, "testcase", classname="skills.lint", name=p.split(":")[0])
        ET.SubElement(case, "error", message=p, type="lint")
    for k, v in counts.items():
        ts.set(k, str(v))
    ts.set("time", f"{total_time:.3f}")
    ts.set("timestamp", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_report(
    judgements: list[dict],
    outcomes: list,
    problems: list[str],
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
        + ", ".join(f"{STATUS_ICON.get(s, '')} {s}: {n}" for s, n in sorted(counts.items()))
    )
    lines += [
        "",
        "| skill | status | last pass | verified on | reasons |",
        "| --- | --- | --- | --- | --- |",
    ]
    for j in judgements:
        lines.append(
            f"| {_cell(j['skill'])} | {STATUS_ICON.get(j['status'], '')} {j['status']} | "
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
                f"| {_cell(o.skill)} | {o.tier} | {o.verdict} | {o.duration_s:.1f} | {o.line or ''} | {_cell(o.message[:200])} |"
            )
    if problems:
        lines += ["", "## Skills that do not load", ""] + [f"- `{_cell(p)}`" for p in problems]
    return "\n".join(lines) + "\n"
