"""The skill format: every kind of bad input gets a clear, located error."""

from __future__ import annotations

import os

import pytest
from conftest import run_cli, skill_text, write_skill
from kbase.ingest.markdown import DocumentError
from kbase.ingest.skills import lint_paths, load_skill, skill_entry


def problems_for(root, path):
    return [str(p) for p in lint_paths([path], root)]


def test_valid_skill_parses_and_chunks(kb_root):
    f = write_skill(kb_root, "warp-sum")
    skill = load_skill(f, kb_root)
    assert skill.name == "warp-sum"
    assert [b.line for b in skill.snippet_blocks()] == [
        skill.text.split("\n").index("```python verify") + 1
    ]
    entry = skill_entry(skill)
    sections = [c.section for c in entry.chunks]
    assert sections[:4] == ["summary", "trigger", "steps", "failure_modes"]
    assert "Why" in sections and "Verification" in sections
    assert entry.tags == ["languages=python", "kernel_types=reduction"]
    lines = skill.text.split("\n")
    steps = next(c for c in entry.chunks if c.section == "steps")
    assert lines[steps.line - 1].startswith("steps:")


def test_tag_aliases_are_canonicalised(kb_root):
    f = write_skill(kb_root, "alias-tags", extra="  archs: [Hopper, B200]\n")
    assert load_skill(f, kb_root).meta.tags.archs == ["sm90", "sm100"]


def test_malformed_yaml_names_file_and_line(kb_root):
    f = write_skill(
        kb_root,
        "bad-yaml",
        text="---\nname: bad-yaml\ndescription: [unclosed\ntrigger: x\n---\nbody\n",
    )
    (p,) = problems_for(kb_root, f)
    assert p.startswith("skills/bad-yaml/SKILL.md:")
    assert "malformed YAML" in p
    line = int(p.split(":")[1])
    assert 3 <= line <= 5


def test_missing_key_is_located(kb_root):
    text = skill_text("no-steps").replace('steps:\n  - "Use a full mask."\n', "")
    f = write_skill(kb_root, "no-steps", text=text)
    (p,) = problems_for(kb_root, f)
    assert "[steps]" in p and "required key is missing" in p


def test_unknown_key_is_an_error_with_its_line(kb_root):
    text = skill_text("extra-key").replace("audit:", "colour: blue\naudit:")
    f = write_skill(kb_root, "extra-key", text=text)
    (p,) = problems_for(kb_root, f)
    lineno = text.split("\n").index("colour: blue") + 1
    assert (
        p.startswith(f"skills/extra-key/SKILL.md:{lineno}:")
        and "[colour]" in p
        and "unknown key" in p
    )


def test_unknown_tag_is_an_error(kb_root):
    f = write_skill(kb_root, "bad-tag", extra="  techniques: [telepathy]\n")
    (p,) = problems_for(kb_root, f)
    assert "[tags.techniques]" in p and "telepathy" in p


def test_name_must_match_folder(kb_root):
    f = write_skill(kb_root, "folder-name", text=skill_text("other-name"))
    (p,) = problems_for(kb_root, f)
    assert "[name]" in p and "does not match its folder" in p and ":2:" in p


def test_snippet_block_required(kb_root):
    f = write_skill(
        kb_root,
        "no-snippet",
        text=skill_text("no-snippet").replace("```python verify", "```python"),
    )
    (p,) = problems_for(kb_root, f)
    assert "verification.blocks" in p


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty"),
        (b"---\nname: x\n\xff\xfe garbage\n---\n", "not valid UTF-8"),
        (b"\x7fELF\x00\x00\x01binary", "binary"),
        (b"---\n" + b"x: " + b"a" * (10 * 1024 * 1024) + b"\n---\n", "too large"),
    ],
)
def test_unreadable_files(kb_root, content, needle):
    d = kb_root / "skills" / "weird"
    d.mkdir()
    (d / "SKILL.md").write_bytes(content)
    (p,) = problems_for(kb_root, d / "SKILL.md")
    assert p.startswith("skills/weird/SKILL.md") and needle in p


def test_symlink_outside_root_is_refused(kb_root, tmp_path):
    outside = tmp_path / "secret.md"
    outside.write_text(skill_text("linked"))
    d = kb_root / "skills" / "linked"
    d.mkdir()
    os.symlink(outside, d / "SKILL.md")
    (p,) = problems_for(kb_root, d / "SKILL.md")
    assert "symlink points outside" in p


def test_related_must_exist(kb_root):
    f = write_skill(kb_root, "has-related", extra="related: [nowhere-skill]\n")
    (p,) = problems_for(kb_root, f)
    assert "nowhere-skill" in p


def test_lint_cli_exit_codes_and_format(kb_root):
    write_skill(kb_root, "good-one")
    env = {**os.environ, "KBASE_ROOT": str(kb_root)}
    ok = run_cli("lint", env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    write_skill(
        kb_root,
        "broken-one",
        text=skill_text("broken-one").replace("audit:\n  date: 2026-11-01\n", ""),
    )
    bad = run_cli("lint", env=env)
    assert bad.returncode == 1
    assert bad.stdout.strip().startswith("skills/broken-one/SKILL.md:") and "[audit]" in bad.stdout


def test_an_edit_is_seen_at_once_even_when_size_and_mtime_stay(kb_root):
    # parsed skills are kept per process: an edit of the same length inside the clock's
    # granularity (mtime restored here) must still be read, and a fix must clear the error
    f = write_skill(kb_root, "same-size")
    st = os.stat(f)
    assert load_skill(f, kb_root).meta.tags.archs == []
    text = f.read_text()
    edited = text.replace("kernel_types: [reduction]", "kernel_types: [reductiox]")
    assert len(edited) == len(text) and edited != text
    f.write_text(edited)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DocumentError) as bad:
        load_skill(f, kb_root)
    assert "reductiox" in str(bad.value.problems)
    f.write_text(text)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert load_skill(f, kb_root).meta.tags.kernel_types == ["reduction"]
