"""The client-host options `fathom run` and `fathom bench` share, turned into a fathom.hosts.ClientChoice."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fathom.hosts import ClientChoice


def add_client_args(p: argparse.ArgumentParser, what: str = "the engines") -> None:
    g = p.add_argument_group(f"client hosts ({what} run there; default: one engine on this host)")
    g.add_argument("--client", action="append", metavar="USER@HOST[:PORT]",
                   help="a client host reached over SSH, or `local` for this host; repeatable"
                        + ("; replaces the suite's clients" if what == "the engines" else ""))
    g.add_argument("--clients-file", metavar="FILE", help="client hosts from a file (YAML list, or one per line)")
    g.add_argument("--on-client-loss", choices=("continue", "fail"),
                   help="a client host lost mid-point: keep the others' data and flag the point (continue, the "
                        "default) or fail the point")
    g.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default ~/.ssh/known_hosts)")
    g.add_argument("--accept-new-host-keys", action="store_true",
                   help="add the key of a host not yet in known_hosts (a changed key is always refused)")


def client_choice(args: argparse.Namespace) -> ClientChoice:
    """What the options say of client hosts."""
    from fathom.hosts import ClientChoice  # fathom.hosts loads pydantic: only for the commands that run

    return ClientChoice.of(args)
