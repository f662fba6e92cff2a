"""Parsing and formatting of sizes and durations, with errors that name the option."""

from __future__ import annotations

import math
import re

from fathom.errors import UsageError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_DUR_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$", re.IGNORECASE)
_DUR_SCALE = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
TC_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)(bit|bps)$", re.IGNORECASE)  # tc's own spellings: 10gbit, 500mbit


def tc_norm(text: str) -> str:
    return text.strip().lower().replace("gbit/s", "gbit").replace("mbit/s", "mbit")


def tc_rate(text: str, what: str = "--host-nic") -> str:
    """A NIC cap as tc writes it (10gbit, 500mbit, 1.5gbit); refused with the accepted forms otherwise."""
    t = tc_norm(text)
    if not TC_RATE.match(t):
        raise UsageError(f"{what} {text!r}: give a rate in bits per second, such as 10gbit, 2.5gbit or 500mbit")
    return t


def tc_bits(rate: str) -> float:
    """A tc rate in bits per second."""
    m = TC_RATE.match(rate.strip().lower())
    if m is None:
        raise UsageError(f"{rate!r} is not a tc rate (10gbit, 500mbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()] * \
        (8 if m.group(3).lower() == "bps" else 1)


_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([km]?)\s*(?:(?:ops|iops)?\s*/\s*s|ops|iops)?\s*$", re.IGNORECASE)
_PCT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_size(value: str | int, option: str = "size") -> int:
    """Bytes from '4k', '4K', '4KiB', '64KB', '2G', '10GiB' or a plain integer.

    Like fio, ceph and rados bench, suffixes are binary (K = 1024): storage tools
    overwhelmingly mean KiB when they write 4k.
    """
    if isinstance(value, bool):
        raise UsageError(f"{option}: expected a size such as 4K, 64KiB or 10G, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"{option}: size must not be negative, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m or (m.group(3) and m.group(3).lower() == "i"):
        raise UsageError(
            f"{option}: cannot read size {value!r}",
            hint="use a number with an optional K, M, G, T suffix (binary units), e.g. 4K, 64KiB, 10G",
        )
    number, prefix = float(m.group(1)), m.group(2).lower()
    result = number * (1024 ** _POWERS[prefix])
    if result != int(result):
        raise UsageError(f"{option}: {value!r} is not a whole number of bytes")
    return int(result)


def parse_duration(value: str | int | float, option: str = "duration") -> float:
    """Seconds from '30', '30s', '5m', '500ms', '1h'."""
    if isinstance(value, bool):
        raise UsageError(f"{option}: expected a duration such as 30s or 5m, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise UsageError(f"{option}: duration must not be negative, got {value}")
        return float(value)
    m = _DUR_RE.match(str(value))
    if not m:
        raise UsageError(f"{option}: cannot read duration {value!r}", hint="use e.g. 500ms, 30s, 5m or 1h")
    unit = m.group(2).lower() if m.group(2) else None
    return float(m.group(1)) * _DUR_SCALE[unit]


def parse_rate(value: str | int | float, option: str = "rate") -> float:
    """Ops per second from 2000, '2000/s', '2.5k', '10k ops/s' (decimal: k = 1000, as rates are written)."""
    if isinstance(value, bool):
        raise UsageError(f"{option}: expected a rate such as 2000, 2.5k or 10k/s (ops/s), got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _RATE_RE.match(str(value))
        if not m:
            raise UsageError(f"{option}: cannot read rate {value!r}", hint="use ops/s, e.g. 2000, 2.5k or 10k/s")
        number = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()]
    if not number > 0:
        raise UsageError(f"{option}: a rate must be above 0 ops/s, got {value!r}")
    return number


def parse_fraction(value: str | float, option: str) -> float:
    """A fraction from '0.1%' (percent) or a plain number in 0..1."""
    if isinstance(value, str) and _PCT_RE.match(value):
        number = float(_PCT_RE.match(value).group(1)) / 100  # type: ignore[union-attr]
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{option}: cannot read {value!r}", hint="use a percentage such as 0.1%") from None
    if not 0 <= number <= 1:
        raise UsageError(f"{option}: {value!r} is not between 0% and 100%")
    return number


def format_rate(ops_s: float) -> str:
    """'2,000 ops/s', '12.5k ops/s'."""
    if ops_s >= 10_000:
        return f"{ops_s / 1000:,.1f}k ops/s".replace(".0k", "k")
    return f"{ops_s:,.0f} ops/s" if ops_s >= 10 else f"{ops_s:.3g} ops/s"


def format_number(v: float) -> str:
    """A figure in plain fixed point, never an exponent: whole with separators from 1,000 (1,690), one decimal
    from 100 (999.8), two below (12.34), three significant digits under 0.1 (0.0123, 0.000123, 0.01)."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 0.1 or v == 0:
        return f"{v:.2f}"
    if not math.isfinite(v):
        return str(v)
    # three significant digits, trailing zeros dropped as %g drops them (0.01, 0.0123), without %g's exponent
    return f"{v:.{2 - math.floor(math.log10(abs(v)))}f}".rstrip("0").rstrip(".")


def format_size(nbytes: int) -> str:
    """'4KiB', '2GiB', '1536B': exact when it can be, else one decimal."""
    for unit, power in (("PiB", 5), ("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        scale = 1024**power
        if nbytes >= scale:
            q = nbytes / scale
            return f"{int(q)}{unit}" if q == int(q) else f"{q:.1f}{unit}"
    return f"{nbytes}B"


def positive_int(value: str | int, option: str, minimum: int = 1) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option}: expected a whole number, got {value!r}") from None
    if n < minimum:
        raise UsageError(f"{option}: must be at least {minimum}, got {n}")
    return n
