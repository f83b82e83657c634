"""Trust sub-commands: `kbase keygen` and `kbase ledger verify|quarantine`.

Only typer/rich at module level, like every command module (the GPU box runs these too).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from kbase.commands.common import JsonOpt, RootOpt, err_console, fail, print_json, root_path

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
    from kbase.validators.signing import SigningError
    from kbase.validators.signing import keygen as make

    try:
        priv, pub, kid = make(path, comment=comment, force=force)
    except (SigningError, OSError) as exc:
        raise fail(str(exc)) from None
    trusted = None
    if trust:
        r = root_path(root)
        dest = r / "ledger" / "trusted-keys" / pub.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pub, dest)
        trusted = str(dest.relative_to(r))
    if as_json:
        print_json({"private": str(priv), "public": str(pub), "key_id": kid, "trusted": trusted})
        return
    typer.echo(f"key id {kid}")
    err_console.print(f"private key: {priv} (mode 0600; never commit it)")
    err_console.print(f"public key:  {pub}" + (f" -> {trusted}" if trusted else ""))
    err_console.print(f"sign runs with: KBASE_SIGNING_KEY={priv} kbase audit ...")


def _scan(root: Path):
    """(trusted keys, problems, [(line number, row, trust state)]) over every ledger line."""
    import json

    from kbase.validators.ledger import LedgerError, ledger_path, validate_row
    from kbase.validators.signing import trusted_keys

    keys = trusted_keys(root)
    path = ledger_path(root)
    shown = "ledger/verifications.jsonl"
    problems: list[str] = []
    states: list[tuple[int, dict, str]] = []
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = validate_row(json.loads(raw), shown, n)
        except json.JSONDecodeError as exc:
            problems.append(f"{shown}:{n}: not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        except LedgerError as exc:
            problems.append(str(exc))
            continue
        states.append((n, row, keys.check(row)))
    return keys, problems, states


@ledger_app.command("verify")
def ledger_verify(root: str | None = RootOpt, as_json: bool = JsonOpt) -> None:
    """Check every row: valid, and signed by a trusted key when ledger/trusted-keys/ has any."""
    r = root_path(root)
    keys, problems, states = _scan(r)
    problems += keys.problems
    counts = {"trusted": 0, "self-reported": 0, "bad-signature": 0}
    for n, row, state in states:
        counts[state] = counts.get(state, 0) + 1
        where = f"ledger/verifications.jsonl:{n}"
        if state == "bad-signature":
            problems.append(f"{where}: [sig] signature does not verify ({row['skill']})")
        elif keys.configured and state != "trusted":
            problems.append(
                f"{where}: [sig] {row['skill']} row is self-reported (not signed by a trusted key)"
            )
    if as_json:
        print_json(
            {
                "rows": len(states),
                "counts": counts,
                "trusted_keys": sorted(keys.names.values()),
                "problems": problems,
            }
        )
    else:
        for p in problems[:200]:
            typer.echo(p)
        if len(problems) > 200:
            typer.echo(f"... and {len(problems) - 200} more")
        err_console.print(
            f"{len(states)} row(s): {counts['trusted']} trusted, {counts['self-reported']} "
            f"self-reported, {counts['bad-signature']} with a bad signature; "
            f"{len(keys.names)} trusted key(s)"
        )
    if problems:
        raise typer.Exit(1)


@ledger_app.command("quarantine")
def ledger_quarantine(root: str | None = RootOpt, as_json: bool = JsonOpt) -> None:
    """Move rows not signed by a trusted key to ledger/self-reported.jsonl (kept, never counted)."""
    from kbase.validators.ledger import ledger_path

    r = root_path(root)
    keys, problems, states = _scan(r)
    if not keys.keys:
        raise fail("ledger/trusted-keys/ holds no key: every row would be moved")
    if problems:
        raise fail(f"fix the ledger first: {problems[0]}")
    keep = [row for _, row, s in states if s == "trusted"]
    move = [row for _, row, s in states if s != "trusted"]
    from kbase.validators.ledger import canonical

    side = r / "ledger" / "self-reported.jsonl"
    with open(side, "a", encoding="utf-8") as fh:
        fh.writelines(canonical(row) + "\n" for row in move)
    tmp = ledger_path(r).with_suffix(".jsonl.tmp")
    tmp.write_text("".join(canonical(row) + "\n" for row in keep), encoding="utf-8")
    tmp.replace(ledger_path(r))
    if as_json:
        print_json({"kept": len(keep), "moved": len(move), "to": str(side.relative_to(r))})
    else:
        err_console.print(
            f"{len(keep)} trusted row(s) kept, {len(move)} moved to {side.relative_to(r)}"
        )


def register(app: typer.Typer) -> None:
    app.command()(keygen)
    app.add_typer(ledger_app, name="ledger")
