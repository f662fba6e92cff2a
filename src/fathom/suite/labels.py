"""Labels on runs: KEY=VALUE tags (`build=abc123`, `ceph=19.2.1`, `nodes=8`) that `fathom history` orders and
groups runs by. A suite's `labels:`, then `--label KEY=VALUE` over it; stored in the run's environment under
`labels` (a run's Ceph and fathom versions are recorded there already, as `ceph_version` and `fathom_version`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fathom.errors import UsageError

KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
MAX_VALUE = 256
# what --by accepts besides a label: the run's time, and facts every run records
BUILTIN = {"time": "when the run was made", "ceph": "the cluster's Ceph version (ceph_version)",
           "fathom": "fathom's version (fathom_version)"}


def key_problem(key: str) -> str | None:
    if not KEY.match(key):
        return (f"label key {key!r}: letters, digits, '_', '.' and '-', starting with a letter or '_', "
                "at most 64 characters")
    if key in BUILTIN:
        return f"label key {key!r} is a fact every run records ({BUILTIN[key]}): use another name"
    return None


def value_problem(key: str, value: str) -> str | None:
    if not value or len(value) > MAX_VALUE or any(c in value for c in "\n\r\t"):
        return f"label {key}: a value of 1 to {MAX_VALUE} characters on one line"
    return None


def parse(items: Iterable[str], option: str = "--label") -> dict[str, str]:
    """['build=abc', 'nodes=8'] -> {'build': 'abc', 'nodes': '8'}; a later KEY replaces an earlier one."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise UsageError(f"{option} {item!r}: expected KEY=VALUE", hint=f"e.g. {option} build=abc123")
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            raise UsageError(f"{option} {item!r}: {problem}")
        out[key] = value
    return out


def checked(raw: Mapping[str, Any]) -> dict[str, str]:
    """A suite's `labels:` mapping: values as text (YAML reads `nodes: 8` as a number)."""
    out: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, (dict, list)) or value is None:
            raise ValueError(f"label {key}: a single value (text or number), not {type(value).__name__}")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        problem = key_problem(str(key)) or value_problem(str(key), text)
        if problem:
            raise ValueError(problem)
        out[str(key)] = text
    return out


def of_run(env: Mapping[str, Any], created: float | None = None) -> dict[str, str]:
    """A run's labels with the facts --by also accepts (ceph, fathom); `time` is the caller's."""
    out = {k: str(v) for k, v in (env.get("labels") or {}).items()}
    for key, fact in (("ceph", "ceph_version"), ("fathom", "fathom_version")):
        if env.get(fact):
            out.setdefault(key, _short_version(str(env[fact])))
    return out


def _short_version(v: str) -> str:
    """'ceph version 16.2.15 (618f...) pacific (stable)' -> '16.2.15'."""
    m = re.search(r"\d+\.\d+(?:\.\d+)?(?:[-.+~][0-9A-Za-z.]+)?", v)
    return m.group(0) if m else v


def numeric(value: str | None) -> float | None:
    """A label's value as a number where it is one ('8', '12.5'; '4k', 'nan' are not), for drawing against it."""
    if value is None:
        return None
    try:
        n = float(value)
    except ValueError:
        return None
    return n if math.isfinite(n) else None


# pre-release words, in their order; each sorts before the release it precedes (19.2.0-rc1 < 19.2.0)
PRE_RELEASE = ("dev", "alpha", "beta", "pre", "rc")
_END = (1, 0, "")  # a value's end: after its pre-releases (0), before what extends it (2: a number, 3: text)


def version_key(value: str) -> tuple[Any, ...]:
    """Order for versions and other text, numbers compared as numbers: '16.2.9' < '16.2.15', 'b9' < 'b10',
    '3.9' < '3.10', '19.2.0-rc1' < '19.2.0' < '19.2.0-1' < '19.2.0.1' (the value itself breaks ties)."""
    key: list[tuple[int, int, str]] = []
    for tok in re.findall(r"\d+|[^\W\d_]+", value):
        low = tok.lower()
        key.append((2, int(tok), "") if tok.isdigit() else (0, PRE_RELEASE.index(low), "") if low in PRE_RELEASE
                   else (3, 0, low))
    return (*key, _END, value)


def ordered(values: Iterable[str]) -> tuple[list[str], dict[str, float] | None]:
    """A label's values in order, and their numbers when they are drawn as numbers (None: as categories).

    Numbers are ordered as numbers and versions as versions; where the two orders differ (3.9 and 3.10 read as
    numbers put 3.10 first, as 3.1) dotted values are versions, unless one cannot be: a fraction (0.25), a
    fraction led by a zero (2.05), a sign or an exponent."""
    vals = list(dict.fromkeys(values))
    by_version = sorted(vals, key=version_key)
    nums = {v: numeric(v) for v in vals}
    if all(n is not None for n in nums.values()):
        by_number = sorted(vals, key=lambda v: (nums[v], version_key(v)))
        if by_number == by_version or not all(_VERSION.fullmatch(v.strip()) for v in vals):
            return by_number, nums  # type: ignore[return-value]
    return by_version, None


_VERSION = re.compile(r"[1-9]\d*(\.(0|[1-9]\d*))+|\d+")  # what a version may look like among numbers
