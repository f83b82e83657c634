"""`kbase search ... --json` without typer, click or rich (issue #11: importing them and building
the app was about a third of a cold search, which an agent pays on every query).

The options are those of the typer command (kbase/commands/core.py, the documented one) and the
answer is the same JSON; tests/test_cli_startup.py runs both on the same arguments. This path
takes only what it reads exactly as typer would: help, an option it does not know, `-` (stdin),
`--`, an index still to build and every error go to the typer command, which then prints what it
always did.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


class _Unsure(Exception):
    """The arguments are not plainly a search this path answers: leave them to typer."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2
        raise _Unsure(message)


def _parser() -> _Parser:
    p = _Parser(prog="kbase search", add_help=False, allow_abbrev=False)
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5)
    for name in ("--kind", "--repo", "--mode", "--since", "--until", "--env", "--root"):
        p.add_argument(name, default=None)
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--status", action="append", default=[])
    p.add_argument("--json", action="store_true", dest="as_json")
    return p


def parse(argv: list[str]) -> argparse.Namespace | None:
    """The search arguments of `kbase ARGV`, or None when typer should read them."""
    if not argv or argv[0] != "search" or "--json" not in argv[1:]:
        return None
    rest = argv[1:]
    if any(a in ("-h", "--help", "--", "-") for a in rest):
        return None
    try:
        args = _parser().parse_args(rest)
    except (_Unsure, ValueError):
        return None
    if not args.as_json:  # "--json" was an option's value
        return None
    if args.root is None:
        args.root = os.environ.get("KBASE_ROOT") or None  # click: an empty variable is unset
    if args.mode is None:
        args.mode = "hybrid"
    return args


def fast_search(argv: list[str]) -> int | None:
    """The exit code after answering `kbase ARGV`, or None to leave it to the typer app."""
    args = parse(argv)
    if args is None:
        return None
    # pydantic looks for plugins in the entry points of every installed distribution when it
    # builds its first validator: ~20 ms of a cold search here. Plugins observe validation for
    # an application's telemetry; a one-shot search has none to give. (pydantic's documented
    # switch; a value the user set is kept.)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _one_blas_thread()
    import gc

    # A cold search makes a few hundred thousand objects (pydantic's schemas, the index's
    # columns) that live until it ends; the cyclic collector's passes over them were ~0.1 s of
    # its CPU time here (issue #11). Reference counting still frees what it can, and the
    # collector is back on before this returns (a fall-back to typer may build an index).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _answer(args)
    finally:
        if enabled:
            gc.enable()


# what OpenBLAS reads for its thread count, in its order; one set by the user is left alone
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def _one_blas_thread() -> None:
    """numpy with one OpenBLAS thread. Loading OpenBLAS starts a thread per core, which spun for
    ~0.1 s of CPU while numpy was imported here (2 cores: CPU time above wall time), taking it
    from the search's own two threads on a busy machine (issue #11). A search's only BLAS call
    is a matrix-vector product over a vector file, whose every row one thread computes either
    way (the same scores, to the bit). OpenBLAS reads the variable once, when it loads; it is
    removed again so that child processes see the environment as it was."""
    import sys

    if "numpy" in sys.modules or any(v in os.environ for v in _BLAS_THREADS):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def _answer(args: argparse.Namespace) -> int | None:
    from kbase.errors import KbaseError

    try:
        from kbase.envspec import parse_env
        from kbase.schema import SearchQuery

        q = SearchQuery.parse(
            env=parse_env(args.env),
            query=args.query,
            k=args.k,
            kind=args.kind,
            repo=args.repo,
            tags=args.tag,
            status=args.status,
            mode=args.mode,
            since=args.since,
            until=args.until,
        )
        from kbase.api import KnowledgeBase

        base = KnowledgeBase(root=args.root, one_query=True)
        if not base.is_indexed() or base.skills_changed():
            return None  # typer's command builds or updates the index, with progress
        result = base.query(q)
    except KbaseError:
        return None  # the typer command reports it, in its words and with its exit code
    from kbase.commands.jsonout import print_json

    print_json(result.model_dump(mode="json"))
    return 0
