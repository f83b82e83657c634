"""What an audit adds to runs (KnowledgeBase.audit): each run recorded as it ends, literal
triggers never seen, the exit code; and its reports: JUnit XML for CI, Markdown for issues and job
summaries, one self-contained HTML page (a skill x environment verdict matrix and an age chart),
which loads no scripts, fonts or stylesheets from elsewhere: it must open from a CI artifact
offline."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from kbase.validators.capture import printable
from kbase.validators.ledger import append_rows, read_ledger, row_from_outcome, seal
from kbase.validators.rules import env_label, latest_by
from kbase.validators.runner import RunOutcome

from kbase.closed_sets import FAIL_LEVELS, STATUS_SPECS, TIERS, VERDICT_SPECS, severity
from kbase.schema import LedgerRow, Problem

_MD_SPECIAL = re.compile(r"[\\`*_\[\]|!#~]")
VERDICT_COLOUR = {v: s.colour for v, s in VERDICT_SPECS.items()}
STATUS_COLOUR = {v: s.colour for v, s in STATUS_SPECS.items()}


def junit_xml(
    outcomes: list, problems: list[Problem], skill_paths: dict[str, str], suite: str = "kbase"
) -> str:
    """One testcase per skill x tier (and one per load problem): the shape CI viewers expect."""
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=suite)
    for o in outcomes:
        attrs = {"classname": f"skills.{o.skill}", "name": o.tier, "time": f"{o.duration_s:.3f}"}
        case = ET.SubElement(ts, "testcase", attrs, file=skill_paths.get(o.skill, ""))
        if o.line:
            case.set("line", str(o.line))
        where = f"{skill_paths.get(o.skill, o.skill)}:{o.line}: " if o.line else ""
        kind = VERDICT_SPECS[o.verdict].junit
        if kind == "skipped":
            ET.SubElement(case, "skipped", message=o.message)
        elif kind in ("failure", "error"):
            el = ET.SubElement(case, kind, message=where + o.message, type=o.verdict)
            el.text = o.output_tail
    for p in problems:
        case = ET.SubElement(ts, "testcase", classname="skills.lint", name=p.path)
        ET.SubElement(case, "error", message=str(p), type="lint")
    ts.set("tests", str(len(ts)))
    for count, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        ts.set(count, str(len(ts.findall(f"testcase/{tag}"))))
    ts.set("time", f"{sum(o.duration_s for o in outcomes):.3f}")
    ts.set("timestamp", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _overview(judgements: list[dict], fingerprint: dict) -> tuple[str, list[tuple[str, int]]]:
    """(the environment on one line, (status, how many skills) worst first): both reports' head."""
    keys = ("python", "torch", "triton", "nvcc", "gpu_name", "compute_capability")
    env = ", ".join(f"{k} {fingerprint[k]}" for k in keys if fingerprint.get(k))
    counts = Counter(j["status"] for j in judgements)
    return env, sorted(counts.items(), key=lambda kv: severity(kv[0]))


def _cell(text: str) -> str:
    """Text from runs and rows (a snippet's output) as inert Markdown: no control characters,
    no HTML, no links, images or emphasis, and no cell break."""
    t = escape(printable(str(text)), quote=False)
    return _MD_SPECIAL.sub(r"\\\g<0>", t).replace("\n", " ")


def _md_head(*names: str) -> list[str]:
    return [f"| {' | '.join(names)} |", "| " + " | ".join(["---"] * len(names)) + " |"]


def markdown_report(rep, *, generated: str, fingerprint: dict) -> str:
    """The audit's Markdown report of a RunReport `rep`."""
    env, counts = _overview(rep.judgements, fingerprint)
    lines = [f"# kbase audit — {generated}", "", f"Environment: {env}", ""]
    if rep.isolation_note:
        lines += [f"> **Warning:** {rep.isolation_note}", ""]
    lines.append("Summary: " + ", ".join(f"{STATUS_SPECS[s].icon} {s}: {n}" for s, n in counts))
    lines += ["", *_md_head("skill", "status", "last pass", "verified on", "reasons")]
    for j in rep.judgements:
        lines.append(
            f"| {_cell(j['skill'])} | {STATUS_SPECS[j['status']].icon} {j['status']} | "
            f"{_cell((j['last_pass'] or '—')[:10])} | {_cell(j['verified_on'] or '—')} | "
            f"{_cell('; '.join(j['reasons']))} |"
        )
    if ran := [o for o in rep.outcomes if o.executed]:
        lines += ["", "## Runs", ""]
        lines += _md_head("skill", "tier", "verdict", "seconds", "line", "message")
        for o in ran:
            lines.append(
                f"| {_cell(o.skill)} | {o.tier} | {o.verdict} | {o.duration_s:.1f} | "
                f"{o.line or ''} | {_cell(o.message[:200])} |"
            )
    if rep.problems:
        lines += ["", "## Skills that do not load", ""]
        lines += [f"- `{_cell(str(p))}`" for p in rep.problems]
    return "\n".join(lines) + "\n"


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d232a;
  background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px}
.meta{color:#5b6672;margin-bottom:12px}
.warn{background:#fff4e0;border-left:4px solid #e08a1e;padding:6px 10px;margin:8px 0}
table{border-collapse:collapse}
th,td{border:1px solid #dde2e7;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7;font-weight:600;vertical-align:bottom}
th.env{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:500;
  font-size:12px}
td.v{text-align:center;color:#fff;font-weight:600;font-size:12px;min-width:44px}
td.none{background:#f7f8f9;color:#b7bec6;text-align:center} .old{opacity:.45}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-size:12px;
  font-weight:600}
.reasons{color:#5b6672;font-size:12px;max-width:520px} .legend span{margin-right:10px}
"""


def _badge(status: str) -> str:
    colour = STATUS_COLOUR.get(status, "#666")
    return f'<span class="badge" style="background:{colour}">{escape(status)}</span>'


def _matrix(
    judgements: list[dict], rows_by_skill: dict[str, list[dict]], shas: dict[str, str]
) -> str:
    ran = (r for rows in rows_by_skill.values() for r in rows if r["verdict"] != "skip")
    latest = latest_by(
        ran, lambda r: (r["skill"], env_label(r["tier"], r.get("fingerprint") or {}))
    )
    envs = {label: r["tier"] for (_, label), r in latest.items()}  # a label starts with its tier
    order = {t: i for i, t in enumerate(TIERS)}  # a tier a newer ledger names sorts last
    cols = sorted(envs, key=lambda e: (order.get(envs[e], len(order)), e))
    head = "".join(f'<th class="env">{escape(c)}</th>' for c in cols)
    out = [f"<table><tr><th>skill</th><th>status</th>{head}</tr>"]
    for j in judgements:
        cells = "".join(_run_cell(latest.get((j["skill"], c)), shas.get(j["skill"])) for c in cols)
        out.append(f"<tr>{_who(j)}{cells}</tr>")
    out.append("</table>")
    if not cols:
        out.append("<p>No runs recorded yet.</p>")
    return "\n".join(out)


def _run_cell(r: dict | None, sha: str | None) -> str:
    if r is None:
        return '<td class="none">·</td>'
    old = r.get("snippet_sha256") != sha
    title = f"{r['verdict']} on {r['at'][:19]}" + (" (earlier snippet)" if old else "")
    if r.get("message"):
        title += f": {r['message']}"
    colour = VERDICT_COLOUR.get(r["verdict"], "#666")
    return (
        f'<td class="{"v old" if old else "v"}" style="background:{colour}" '
        f'title="{escape(title)}">{escape(r["verdict"])}<br>{r["at"][5:10]}</td>'
    )


def _text(x: int, y: int, attrs: str, body: object) -> str:
    return f'<text x="{x}" y="{y}" {attrs}>{body}</text>'


def _age_chart(judgements: list[dict], max_ages: dict[str, int], today: dt.date) -> str:
    """Bars: days since the last pass (coloured by status), against each max_age_days tick."""
    bar_h, gap, label_w, width = 18, 6, 260, 520
    ages: dict[str, tuple[int | None, int]] = {}
    for j in judgements:
        last = j.get("last_pass")
        age = (today - dt.date.fromisoformat(last[:10])).days if last else None
        ages[j["skill"]] = (age, max_ages.get(j["skill"], 180))
    scale_max = max([30] + [x for pair in ages.values() for x in pair if x is not None])
    height = len(judgements) * (bar_h + gap) + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 80}" height="{height}" '
        f'role="img" aria-label="days since last pass">'
    ]
    for i, j in enumerate(judgements):
        y = 10 + i * (bar_h + gap)
        age, max_age = ages[j["skill"]]
        parts.append(
            _text(label_w - 8, y + 13, 'text-anchor="end" font-size="12"', escape(j["skill"]))
        )
        if age is None:
            parts.append(
                _text(label_w + 4, y + 13, 'font-size="12" fill="#9aa3ad"', "never passed")
            )
        else:
            w = max(2, int(width * age / scale_max))
            colour = STATUS_COLOUR.get(j["status"], "#666")  # bar length is age, colour the status
            parts.append(
                f'<rect x="{label_w}" y="{y}" width="{w}" height="{bar_h}" rx="3" fill="{colour}"/>'
            )
            parts.append(_text(label_w + w + 6, y + 13, 'font-size="12"', f"{age} d"))
        tick = label_w + int(width * max_age / scale_max)
        parts.append(
            f'<line x1="{tick}" x2="{tick}" y1="{y - 2}" y2="{y + bar_h + 2}" '
            'stroke="#d64545" stroke-width="2"/>'
        )
    axis_y = height - 18
    parts.append(
        f'<line x1="{label_w}" x2="{label_w + width}" y1="{axis_y}" y2="{axis_y}" '
        'stroke="#5b6672"/>'
    )
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        x = label_w + int(width * frac)
        attrs = 'font-size="11" text-anchor="middle" fill="#5b6672"'
        parts.append(_text(x, axis_y + 14, attrs, f"{int(scale_max * frac)} d"))
    parts.append("</svg>")
    return "".join(parts)


def _who(j: dict) -> str:
    """A skill's name and status badge: the first two cells of every table here."""
    return f"<td>{escape(j['skill'])}</td><td>{_badge(j['status'])}</td>"


def _reasons(j: dict) -> str:
    return f"<td class='reasons'>{'<br>'.join(escape(r) for r in j['reasons'])}</td>"


def _attention(judgements: list[dict]) -> str:
    # What a maintainer acts on comes first (issue #27: the reasons were ~12,000 px down): every
    # skill that is not verified, worst first, with why.
    todo = sorted(
        (j for j in judgements if j["status"] != "verified"),
        key=lambda j: (severity(j["status"]), j["skill"]),
    )
    if not todo:
        return "<h2>Needs attention</h2><div>nothing: every skill is verified</div>"
    rows = "".join(f"<tr>{_who(j)}{_reasons(j)}</tr>" for j in todo)
    head = "<tr><th>skill</th><th>status</th><th>why</th></tr>"
    return f"<h2>Needs attention</h2><table>{head}{rows}</table>"


def html_report(
    judgements: list[dict],
    rows_by_skill: dict[str, list[dict]],
    shas: dict[str, str],
    max_ages: dict[str, int],
    *,
    now: dt.datetime,
    fingerprint: dict,
    isolation_note: str | None,
    problems: list[Problem],
) -> str:
    env, counts = _overview(judgements, fingerprint)
    summary = " ".join(f"{_badge(s)} {n}" for s, n in counts)
    legend = "".join(
        f'<span><span class="badge" style="background:{c}">{v}</span></span>'
        for v, c in VERDICT_COLOUR.items()
    )
    rows = "".join(
        f"<tr>{_who(j)}<td>{escape((j['last_pass'] or '—')[:10])}</td>"
        f"<td>{escape(j['verified_on'] or '—')}</td>{_reasons(j)}</tr>"
        for j in judgements
    )
    attention = _attention(judgements)
    warn = f'<div class="warn">{escape(isolation_note)}</div>' if isolation_note else ""
    probs = "".join(f"<li><code>{escape(str(p))}</code></li>" for p in problems)
    probs = f"<h2>Skills that do not load</h2><ul>{probs}</ul>" if problems else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>kbase audit {escape(now.date().isoformat())}</title>
<style>{_CSS}</style></head><body>
<h1>kbase audit</h1>
<div class="meta">{escape(now.isoformat(timespec="minutes"))} · {escape(env)}</div>
{warn}<div>{summary}</div>
{probs}
{attention}
<h2>Verdicts by environment</h2>
<div class="legend">{legend}
<span style="color:#5b6672">faded: an earlier version of the snippet</span></div>
{_matrix(judgements, rows_by_skill, shas)}
<h2>Days since the last pass</h2>
<div class="meta">bar: days since the last pass, coloured by status ·
red tick: the skill's max_age_days</div>
{_age_chart(judgements, max_ages, now.date())}
<h2>Status</h2>
<table><tr><th>skill</th><th>status</th><th>last pass</th><th>verified on</th><th>reasons</th></tr>
{rows}</table>
</body></html>
"""


class Recorder:
    """An on_done callback that writes each run to the ledger as soon as it finishes: a long audit
    that is interrupted (Ctrl-C, a CI or device time limit) keeps what it finished."""

    def __init__(self, root: Path, then: Callable[[RunOutcome], None] | None = None):
        from kbase.validators.signing import signer_from_env, trusted_keys

        self.root, self.then, self.count = root, then, 0
        signer = signer_from_env()  # loaded now, before any snippet runs; a bad key stops here
        # With trusted keys configured, an unsigned row could only ever be self-reported: it
        # would make `kbase ledger verify` fail, so it is not written.
        self.enabled = signer is not None or not trusted_keys(root).configured
        self.note: str | None = None
        if not self.enabled:
            self.note = "runs not recorded: ledger/trusted-keys/ is configured and "
            self.note += "KBASE_SIGNING_KEY is not set (unsigned rows would only be self-reported)"

    def __call__(self, outcome: RunOutcome) -> None:
        if self.enabled and outcome.executed:  # skips decided up front are not runs
            row = row_from_outcome(outcome)
            LedgerRow.model_validate(row)  # a malformed row must fail here, not in every reader
            self.count += append_rows(self.root, [seal(row)])
        if self.then:
            self.then(outcome)


def unseen_literals(root: Path, skills: list) -> list[Problem]:
    """A literal trigger that no counted run of the current snippet printed, on any tier."""
    from kbase.validators.claims import literal_expected
    from kbase.validators.status import _ledger_split

    rows = _ledger_split(Path(root).resolve())[0]
    out: list[Problem] = []
    for s in skills:
        mine = [r for r in rows.get(s.name, []) if r.get("snippet_sha256") == s.snippet_sha256()]
        for lit in getattr(s.meta, "literal_triggers", []) or []:
            runs = [r for r in mine if literal_expected(s.meta, lit, r.get("fingerprint"))]
            if runs and not any(lit in (r.get("literals_seen") or []) for r in runs):
                idx = s.meta.trigger.index(lit) if lit in s.meta.trigger else 0
                msg = f"literal trigger {lit!r} never appeared in the output of a counted run "
                msg += f"({len(runs)} run(s) of this snippet)"
                line = s.doc.line_of(("trigger", idx))
                out.append(Problem(path=s.path, line=line, field="trigger", message=msg))
    return out


def exit_code(result: Any, fail_on: str) -> int:
    """1 when something at or above the --fail-on level is present (load problems count too)."""
    if fail_on == "never":
        return 0
    statuses = {j["status"] for j in result.judgements}
    return 1 if (statuses & FAIL_LEVELS[fail_on] or result.problems) else 0


def write_reports(
    root: Path,
    rep: Any,
    skills: list,
    now: dt.datetime,
    fingerprint: dict,
    *,
    markdown: Path | None = None,
    html: Path | None = None,
) -> None:
    if markdown:
        stamp = now.isoformat(timespec="minutes")
        _write(markdown, markdown_report(rep, generated=stamp, fingerprint=fingerprint))
    if html:
        rows: dict[str, list[dict]] = {s.name: [] for s in skills}
        for row in read_ledger(root, strict=False).rows:
            rows.get(row["skill"], []).append(row)
        shas = {s.name: s.snippet_sha256() for s in skills}
        ages = {s.name: s.meta.audit.max_age_days for s in skills}
        kw = {"fingerprint": fingerprint, "isolation_note": rep.isolation_note}
        page = html_report(rep.judgements, rows, shas, ages, now=now, problems=rep.problems, **kw)
        _write(html, page)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
