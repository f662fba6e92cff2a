"""Entry point: builds the parser from the command modules and turns errors into messages.

Adding a command group means adding a module to COMMAND_MODULES that defines
`register(subparsers)`; each subcommand sets `func(args) -> int | None`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from fathom.version import __version__
from fathom.errors import FathomError

COMMAND_MODULES = {
    "fathom.cli.cluster": ("cluster",),
    "fathom.cli.run": ("suites", "plan", "run", "slo", "ls", "show", "export"),
    "fathom.cli.report": ("report", "compare", "import"),
    "fathom.cli.bench": ("bench", "cleanup"),
    "fathom.cli.history": ("history", "label"),
    "fathom.cli.live": ("watch",),
    "fathom.cli.k8s": ("k8s",),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `command`, only the module that owns it is imported.

    Start-up time is CPU that short commands (fathom bench) pay on every call, and the
    modules behind reports and runs import much that a bench does not need.
    """
    parser = argparse.ArgumentParser(
        prog="fathom",
        description="Ceph-first storage benchmarking: prepare, sweep, measure, store, report.",
    )
    parser.add_argument("--version", action="version", version=f"fathom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    owners = [m for m, cmds in COMMAND_MODULES.items() if command in cmds] or list(COMMAND_MODULES)
    for name in owners:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except BrokenPipeError:
        # A closed pipe (fathom ... | head) is not an error worth a traceback. SIGPIPE stays ignored (Python's
        # default): its default action would kill fathom on a write to any peer that left (a websocket, SSH).
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        raise
    except FathomError as exc:
        print(f"fathom: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fathom: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())
