"""The client-host options `fathom run` and `fathom bench` share (parsed by fathom.hosts.clients_from_args)."""

from __future__ import annotations

import argparse
from typing import Any


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


def clients_spec(args: argparse.Namespace, base: Any = None) -> Any:
    """The client hosts the options name over base (a suite's ClientsSpec, or None): a ClientsSpec, or None
    for one engine on this host."""
    from fathom.hosts import clients_from_args

    g = lambda k: getattr(args, k, None)  # noqa: E731 - commands without the options have none
    return clients_from_args(g("client"), g("clients_file"), base, on_loss=g("on_client_loss"),
                             known_hosts=g("known_hosts"), accept_new=bool(g("accept_new_host_keys")))
