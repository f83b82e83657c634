"""Skills: load skills/<name>/SKILL.md, validate its front-matter, chunk it for the index."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kbase.ingest.files import display_path, read_checked
from kbase.ingest.markdown import Document, DocumentError, parse_document, validation_problems
from pydantic import ValidationError

from kbase.config import SKILL_FILE
from kbase.errors import NotFound
from kbase.schema import TAG_KEYS, Chunk, CodeBlock, Entry, Problem, SkillMeta


@dataclass
class Skill:
    meta: SkillMeta
    doc: Document
    path: str  # relative to the root
    text: str

    @property
    def name(self) -> str:
        return self.meta.name

    def snippet_blocks(self) -> list[CodeBlock]:
        marks = set(self.meta.verification.blocks)
        return [b for b in self.doc.code_blocks if marks & set(b.info.split()[1:])]

    def snippet_sha256(self) -> str:
        """What a ledger row vouches for: the runner version and exactly the files a run
        executes, each length-prefixed, so that moving a fence changes the hash whenever it
        changes what runs (a row's tier is signed in the row itself)."""
        from kbase.validators.snippets import RUNNER_VERSION, SnippetError, layout_blocks

        h = hashlib.sha256(f"kbase-runner {RUNNER_VERSION}\n".encode())
        try:
            parts = [(f.name, f.text) for f in layout_blocks(self.snippet_blocks()).files]
        except SnippetError:  # never runs; still one hash per text
            parts = [(b.info, b.code) for b in self.snippet_blocks()]
        for name, text in parts:
            for part in (name.encode(), text.encode()):
                h.update(len(part).to_bytes(8, "big") + part)
        return h.hexdigest()


def load_skill(path: Path, root: Path) -> Skill:
    """Parse and validate one SKILL.md. Raises DocumentError with every problem found."""
    shown, text = read_checked(path, root, DocumentError)
    doc = parse_document(text, shown)
    try:
        meta = SkillMeta.model_validate(doc.meta)
    except ValidationError as exc:
        unknown = "unknown key (see docs/skill-format.md for the allowed keys)"
        raise DocumentError(validation_problems(exc, shown, doc.meta_node, 2, unknown)) from None
    problems: list[Problem] = []
    here = partial(Problem, path=shown)
    folder = path.parent.name
    if meta.name != folder:
        why = f"name {meta.name!r} does not match its folder {folder!r}"
        problems.append(here(line=doc.line_of(("name",)), field="name", message=why))
    skill = Skill(meta=meta, doc=doc, path=shown, text=text)
    if not skill.snippet_blocks():
        marks = ", ".join(meta.verification.blocks)
        why = f"no fenced block in the body is marked with {marks!r} (e.g. ```python verify)"
        problems.append(here(line=doc.line_of(("verification",)), field=_BLOCKS, message=why))
    for b in skill.snippet_blocks():
        if _is_empty_code(b.code):
            why = f"the ```{b.info} block has no code: it would pass without checking anything"
            problems.append(here(line=b.line, field=_BLOCKS, code="empty-snippet", message=why))
    if problems:
        raise DocumentError(problems)
    return skill


def _is_empty_code(code: str) -> bool:
    """Nothing but blank lines and comments (`#` or `//`)."""
    return all(not ln.strip() or ln.lstrip().startswith(("#", "//")) for ln in code.splitlines())


def find_skill_files(root: Path) -> list[Path]:
    dirs = (root / "skills").iterdir() if (root / "skills").is_dir() else ()
    return sorted(p / SKILL_FILE for p in dirs if p.is_dir() and (p / SKILL_FILE).exists())


class UnknownSkill(NotFound):
    """A name or path on the command line that is no skill: bad usage (exit 2)."""

    exit_code = 2


def skill_file(root: Path, ref: str) -> Path:
    """A name (`triton-masked-tail`), a folder or a SKILL.md path -> the SKILL.md path."""
    p = Path(ref)
    for cand in (p, root / p):
        if cand.is_dir() and (cand / "SKILL.md").exists():
            return cand / "SKILL.md"
        if cand.is_file() and cand.name == "SKILL.md":
            return cand
    named = root / "skills" / ref / "SKILL.md"
    if named.exists():
        return named
    raise UnknownSkill(
        f"no skill {ref!r}: neither a path to a SKILL.md nor skills/{ref}/SKILL.md under {root}"
    )


def load_skills(root: Path, refs: Iterable[str] | None):
    """(skills, load problems). Unknown names raise UnknownSkill."""
    refs = list(refs or [])
    files = [skill_file(root, r) for r in refs] if refs else find_skill_files(root)
    first: dict[Path, Path] = {}
    for f in files:
        first.setdefault(f.resolve(), f)  # a skill named twice loads once
    skills, problems = [], []
    for f in first.values():
        try:
            skills.append(load_skill(f, root))
        except DocumentError as exc:
            problems.extend(exc.problems)
    return skills, problems


Related = list[tuple[str, str, int, int]]  # (path, related name, index, line)


def _lint_file(f: Path, root: Path) -> tuple[list[Problem], Related]:
    """One file's own problems, and the related-skill references to check against all skills."""
    if not f.exists():
        return [Problem(path=display_path(f, root), message="no such file")], []
    try:
        s = load_skill(f, root)
    except DocumentError as de:
        return de.problems, []
    from kbase.validators.claims import host_dependent_claims
    from kbase.validators.device_gate import lint_gpu_use
    from kbase.validators.numbers import ledger_narration, unbacked_numbers

    problems = unbacked_numbers(s) + ledger_narration(s) + _unfinished(s) + _dash_runs(s)
    here = partial(Problem, path=s.path)
    ids = [c.id for c in s.meta.claims]
    for cid, dep in host_dependent_claims(s):
        msg = (
            f"claim {cid} is measured on a CPU tier by a torch operator whose CPU "
            f"kernel depends on the host ({dep}): pin the reference path "
            "(torch.backends.mkldnn.flags(enabled=False)) or declare when: {cpu_flags: [...]}"
        )
        line = s.doc.line_of(("claims", ids.index(cid)))
        problems.append(here(line=line, field=f"claims.{cid}", code=_HOST_CPU, message=msg))
    why = lint_gpu_use(s.meta.verification.gpu_use, "\n".join(b.code for b in s.snippet_blocks()))
    if why:
        line = s.doc.line_of(("verification", "gpu_use"))
        problems.append(here(line=line, field="verification.gpu_use", message=why))
    return problems, [
        (s.path, rel, i, s.doc.line_of(("related", i))) for i, rel in enumerate(s.meta.related)
    ]


_HOST_CPU = "host-dependent-cpu-claim"
_BLOCKS = "verification.blocks"
_SAMPLE = (
    "the snippet is `kbase new`'s unchanged sample: replace it with one "
    "that proves this skill's claim"
)


def _dash_runs(s: Skill) -> list[Problem]:
    """A run of three dashes inside the front-matter: readers that find the end of front-matter
    by searching for '---' anywhere (Claude Code's plugin loader) cut the YAML there and load the
    skill with no metadata, while YAML itself is fine with it."""
    lines = s.text.splitlines()
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), 0)
    why = "'---' inside the front-matter ends it for some skill loaders; reword it"
    here = partial(Problem, path=s.path, code="dashes-in-front-matter", message=why)
    return [here(line=i + 1) for i in range(1, end) if "---" in lines[i]]


def _unfinished(s: Skill) -> list[Problem]:
    """What `kbase new` left to fill in (issue #27: an untouched scaffold passed lint and check):
    TODO placeholders outside code blocks, and its sample snippet unchanged."""
    import re

    from kbase.validators.scaffold import sample_snippet

    here = partial(Problem, path=s.path)
    out: list[Problem] = []
    fence = ""
    for i, line in enumerate(s.text.splitlines(), 1):
        mark = line.lstrip()[:3]
        if mark in ("```", "~~~"):
            fence = "" if fence == mark else (fence or mark)
        elif not fence and re.search(r"\bTODO\b", line):
            why = "TODO placeholder: write what it asks for, or remove the line"
            out.append(here(line=i, code="todo-text", message=why))
    sample = sample_snippet()
    for b in s.snippet_blocks():
        if b.code.strip() == sample:
            out.append(here(line=b.line, field=_BLOCKS, code="sample-snippet", message=_SAMPLE))
    return out


def entry_of(f: Path, root: Path) -> tuple[Entry | None, list[Problem]]:
    """(index entry or None, problems) of one SKILL.md."""
    try:
        return skill_entry(load_skill(f, root)), []
    except DocumentError as de:
        return None, de.problems


def lint_paths(paths: list[Path], root: Path) -> list[Problem]:
    """Every problem in the given SKILL.md files (or skill folders), in their order, plus
    cross-skill checks."""
    results = [_lint_file(p / SKILL_FILE if p.is_dir() else p, root) for p in paths]
    problems = [p for own, _ in results for p in own]
    known = {p.parent.name for p in find_skill_files(root)}
    for _, refs in results:
        for path, rel, i, line in refs:
            if rel not in known:
                why = f"related skill {rel!r} does not exist"
                problems.append(Problem(path=path, line=line, field=f"related.{i}", message=why))
    return problems


def _join(items: list[str]) -> str:
    return "\n".join(f"- {x}" for x in items)


def skill_entry(skill: Skill) -> Entry:
    """Chunks: summary+trigger, steps, failure modes, and each body section."""
    m, d = skill.meta, skill.doc
    eid = m.name
    title = d.title or m.name
    chunks: list[Chunk] = []
    add = partial(Chunk.add, chunks, eid, "skill", skill.path)

    tag_words = " ".join(v for k in TAG_KEYS for v in getattr(m.tags, k))
    summary = f"{title}\n{m.description}\nWhen: \n{_join(m.trigger)}\nTags: {tag_words}"
    add("summary", summary, d.line_of(("description",)))
    add("trigger", _join(m.trigger), d.line_of(("trigger",)))
    add("steps", _join(m.steps), d.line_of(("steps",)))
    fm_text = "\n".join(
        f"- symptom: {f.symptom}\n  cause: {f.cause}\n  fix: {f.fix}" for f in m.failure_modes
    )
    add("failure_modes", fm_text, d.line_of(("failure_modes",)))
    for sec in d.sections:
        text = f"{sec.title}\n{sec.text}" if sec.title else sec.text
        if sec.level != 1 or sec.text:  # a title heading with nothing under it is no chunk
            add(sec.title or "intro", text, sec.line)
    return Entry(
        id=eid,
        kind="skill",
        title=title,
        path=skill.path,
        line=1,
        content_hash=hashlib.sha256(skill.text.encode()).hexdigest(),
        chunks=chunks,
        tags=m.tags.flat(),
    )
