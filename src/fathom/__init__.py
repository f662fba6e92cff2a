"""fathom: Ceph-first storage benchmarking.

`import fathom` stays light (the CLI imports it on every start): the notebook API (fathom.api, which
brings in pandas) is loaded on first use of `fathom.open`, `fathom.Results` or `fathom.API_VERSION`.
"""

from __future__ import annotations

from typing import Any

from fathom.version import __version__

__all__ = ["API_VERSION", "Histogram", "Results", "__version__", "open"]
_API = {"open", "Results", "Histogram", "API_VERSION"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from fathom import api

        return getattr(api, name)
    raise AttributeError(f"module 'fathom' has no attribute {name!r}")
