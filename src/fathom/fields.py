"""What every model of a suite file shares: a strict, frozen base model; field parsers for validators, whose
messages say what is allowed; and did-you-mean hints for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from fathom.errors import UsageError
from fathom.units import parse_duration, parse_size


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def size_value(v: Any, what: str) -> int:
    try:
        return parse_size(v, what)
    except UsageError:
        raise ValueError("expected a size such as 4k, 64KiB, 256MiB or 2G (binary units)") from None


def duration_value(v: Any, what: str) -> float:
    try:
        return parse_duration(v, what)
    except UsageError:
        raise ValueError("expected a duration such as 500ms, 30s or 5m") from None


def positive_seconds(v: Any, what: str) -> float:
    d = duration_value(v, what)
    if d <= 0:
        raise ValueError("must be longer than 0 s")
    return d


def suggest(word: str, known: Iterable[str], what: str, allowed: Iterable[str]) -> str:
    """'; did you mean X? (what: allowed)' with the closest known name, or '; what: allowed' without one."""
    close = difflib.get_close_matches(word, list(known), n=1)
    listed = ", ".join(allowed)
    return f"; did you mean {close[0]!r}? ({what}: {listed})" if close else f"; {what}: {listed}"
