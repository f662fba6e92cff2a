"""Commands of this group are registered here (placeholder until the group lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # noqa: ARG001
    return None
