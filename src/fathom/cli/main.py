"""Entry point: builds the parser from the command modules and turns errors into messages.

Adding a command group means adding a module that defines `register(subparsers)` and one line per command
in COMMANDS (a fathom.plugins table: command -> module); each subcommand sets `func(args) -> int | None`.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
from collections.abc import Callable
from typing import Any

from fathom.version import __version__
from fathom.errors import FathomError
from fathom.plugins import Table

# command -> the module whose `register(subparsers)` adds it (and the other commands of its group)
COMMANDS: Table[Callable[[Any], None]] = Table("command", {
    "cluster": "fathom.cli.cluster",
    **dict.fromkeys(("suites", "plan", "run", "slo", "ls", "show", "export"), "fathom.cli.run"),
    **dict.fromkeys(("report", "compare", "import"), "fathom.cli.report"),
    **dict.fromkeys(("bench", "cleanup"), "fathom.cli.bench"),
    **dict.fromkeys(("history", "label"), "fathom.cli.history"),
    "watch": "fathom.cli.live",
    "k8s": "fathom.cli.k8s",
    "baseline": "fathom.cli.baseline",
}, "register")


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
    wanted = [command] if command in COMMANDS.modules else COMMANDS.names()
    for register in dict.fromkeys(COMMANDS.get(c) for c in wanted):  # a group's module registers all of its own
        register(sub)
    return parser


def interruptible() -> None:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt in every command, which each stops on cleanly (a bench's engine
    told to stop, a run's teardown) and main() turns into exit code 130. A shell starts a script's background jobs
    with SIGINT ignored, and Python then installs no handler of its own: a command started so (a bench) ran on to
    its own end. Only an ignored SIGINT is undone; a handler someone set is theirs."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    interruptible()  # here, for every command: none of them sets SIGINT up itself
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
        # flushed here, not by the interpreter at exit, where a reader that left (| head) is a printed
        # BrokenPipeError this handler never sees: what stdout buffered is written now
        sys.stdout.flush()
    except BrokenPipeError:
        # A closed pipe (fathom ... | head) is not an error worth a traceback. SIGPIPE stays ignored (Python's
        # default): its default action would kill fathom on a write to any peer that left (a websocket, SSH),
        # whose broken pipe is an error (re-raised).
        if not _stdout_gone():
            raise
        # stdout to /dev/null: the interpreter's own flush at exit must not fail on what is still buffered
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except FathomError as exc:
        print(f"fathom: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fathom: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def _stdout_gone() -> bool:
    """Has stdout's reader left? A pipe whose reader closed polls POLLERR. A flush cannot tell: a write that failed
    leaves nothing buffered (and an unbuffered stdout buffers nothing), so it succeeds after the error."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced or closed (a test's capture): not a pipe
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))


if __name__ == "__main__":
    raise SystemExit(main())
