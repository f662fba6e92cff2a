"""Plugin tables: one way to register interfaces, engines, transports and command groups.

Each table names its plugins and the module that provides each, up front: a new plugin is one module and one
line in its table. Modules are imported on first use (start-up CPU counts in every short command), and the
names are known without importing anything, so `fathom plan` and error messages list them for free. The
shape test reads the tables' module names as imports, so nothing hides who uses a plugin module.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from fathom.errors import FathomError

T = TypeVar("T")


class Table(Generic[T]):
    """name -> the module providing it; `get` imports the module and returns its `attr`."""

    def __init__(self, what: str, modules: Mapping[str, str], attr: str):
        self.what, self.modules, self.attr = what, dict(modules), attr
        self._loaded: dict[str, T] = {}

    def names(self) -> list[str]:
        """Every plugin's name, in the table's order."""
        return list(self.modules)

    def get(self, name: str) -> T:
        """The plugin `name`; FathomError naming the known ones when there is none."""
        if name not in self._loaded:
            mod = self.modules.get(name)
            if mod is None:
                raise FathomError(f"unknown {self.what} {name!r}; {self.what}s: {', '.join(self.modules)}")
            self._loaded[name] = getattr(importlib.import_module(mod), self.attr)
        return self._loaded[name]

    def all(self) -> dict[str, T]:
        """Every plugin, loaded, in the table's order."""
        return {n: self.get(n) for n in self.modules}

    def module_of(self, name: str) -> Any:
        """The module that provides `name` (imported)."""
        return importlib.import_module(self.modules[name])
