"""Trust and experience sub-commands: `kbase keygen`, `kbase ledger verify|quarantine`, and the
experience loop, `kbase feedback` and `kbase propose`."""

from __future__ import annotations

from pathlib import Path

import typer

from kbase.commands.common import JsonOpt, RootOpt, add_commands, err_console, kb, print_json

ledger_app = typer.Typer(help="Check and maintain the signed verification ledger.")


def keygen(
    path: Path = typer.Argument(..., help="where to write the private key (PATH.pub: public key)"),
    comment: str = typer.Option("", "--comment", help="a name for the key in the .pub file"),
    trust: bool = typer.Option(
        False, "--trust", help="also copy the public key into ledger/trusted-keys/"
    ),
    force: bool = typer.Option(False, "--force", help="overwrite an existing key pair"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write an ed25519 key pair for signing ledger rows (KBASE_SIGNING_KEY=PATH)."""
    if trust:
        info = kb(root).keygen(path, comment=comment, force=force)
    else:  # a key pair needs no knowledge base
        from kbase.api import KnowledgeBase

        info = KnowledgeBase.new_keypair(path, comment=comment, force=force)
    if as_json:
        print_json(info)
        return
    typer.echo(f"key id {info['key_id']}")
    err_console.print(f"private key: {info['private']} (mode 0600; never commit it)")
    trusted = f" -> {info['trusted']}" if info["trusted"] else ""
    err_console.print(f"public key:  {info['public']}{trusted}")
    err_console.print(f"sign runs with: KBASE_SIGNING_KEY={info['private']} kbase audit ...")


def ledger_verify(root: str | None = RootOpt, as_json: bool = JsonOpt) -> None:
    """Check every row: valid, and signed by a trusted key when ledger/trusted-keys/ has any."""
    rep = kb(root).ledger_verify()
    if as_json:
        print_json(rep.as_dict())
    else:
        for p in rep.problems[:200]:
            typer.echo(str(p))
        if len(rep.problems) > 200:
            typer.echo(f"... and {len(rep.problems) - 200} more")
        c = rep.counts
        err_console.print(
            f"{rep.rows} row(s): {c.get('trusted', 0)} trusted, {c.get('self-reported', 0)} "
            f"self-reported, {c.get('bad-signature', 0)} with a bad signature; "
            f"{len(rep.trusted_keys)} trusted key(s)"
        )
    if rep.problems:
        raise typer.Exit(1)


def ledger_quarantine(root: str | None = RootOpt, as_json: bool = JsonOpt) -> None:
    """Move rows no trusted key signed to ledger/self-reported.jsonl (kept, never counted)."""
    kept, moved, to = kb(root).ledger_quarantine()
    if as_json:
        print_json({"kept": kept, "moved": moved, "to": to})
    else:
        err_console.print(f"{kept} trusted row(s) kept, {moved} moved to {to}")


def feedback(
    entry_id: str = typer.Argument(..., metavar="ID", help="the entry you acted on"),
    verdict: str = typer.Argument(..., help="helpful, harmful or outdated"),
    note: str = typer.Option("", "--note", "-m", help="what happened, in a sentence or two"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Say how acting on an entry went (append-only log; shown with the entry)."""
    out = kb(root).feedback(entry_id, verdict, note, source="cli")
    if as_json:
        print_json(out)
        return
    c = out["feedback"]["counts"]
    typer.echo(
        f"recorded {verdict} for {entry_id} "
        f"(helpful {c['helpful']}, harmful {c['harmful']}, outdated {c['outdated']})"
    )


def propose(
    title: str = typer.Option(..., "--title", help="one line: the problem"),
    symptom: str = typer.Option(..., "--symptom", help="the symptom or the literal error text"),
    cause: str = typer.Option(..., "--cause", help="why it happened"),
    fix: str = typer.Option(..., "--fix", help="what fixed it"),
    snippet: typer.FileText | None = typer.Option(
        None, "--snippet", help="a Python file that exits 0 when the fix holds"
    ),
    name: str | None = typer.Option(None, "--name", help="kebab-case name (default: from title)"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write a draft skill under skills/_drafts/ (status draft until a person reviews it)."""
    code = snippet.read(20_001) if snippet is not None else None
    out = kb(root).propose(title, symptom, cause, fix, snippet=code, name=name)
    if as_json:
        print_json(out)
        return
    typer.echo(f"wrote {out['path']} (status draft)")
    if out.get("note"):
        typer.echo(out["note"], err=True)


add_commands(ledger_app, ("verify", ledger_verify), ("quarantine", ledger_quarantine))
COMMANDS = (keygen, ("ledger", ledger_app), feedback, propose)
