"""Named plug-ins of one kind (engines, report formats, prompt kinds, figures): one
registry each, name -> item, in registration order.

A registry refuses a name taken twice, and a name it does not hold is an error that lists
the names it does (:class:`UnknownName`, a :class:`KeyError`, so ``get(name, default)``
and ``in`` work as on a dict). Given a package, :meth:`Registry.discover` imports each of
its modules once: a plug-in is one new file there, registering itself on import (or
found by its package in the modules returned).

A leaf module: it imports nothing of perfgate, so every layer may import it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, MutableMapping
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """A name no item of a registry has; the message lists the names it holds."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.kind = kind
        self.name = name
        self.known = known  # sorted

    def __str__(self) -> str:
        known = ", ".join(self.known) if self.known else "none registered"
        return f"no {self.kind} {self.name!r} (known: {known})"


class Registry(MutableMapping[str, T]):
    """Items of one kind by name, in registration order.

    ``kind`` names the items in errors ("report format"). ``package`` (a dotted name) is
    where :meth:`discover` looks for modules. ``registry[name] = item`` registers, and
    ``del registry[name]`` unregisters, with the same checks as :meth:`register` and
    :meth:`unregister`.
    """

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._items: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str, item: T) -> T:
        """Add ``item`` as ``name`` and return it; a name already taken is a ValueError."""
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        return item

    def unregister(self, name: str) -> T:
        """Remove the item named ``name`` and return it (:class:`UnknownName` when none)."""
        item = self[name]
        del self._items[name]
        return item

    def __getitem__(self, name: str) -> T:
        """The item named ``name``; :class:`UnknownName`, listing the known names, if none."""
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.kind, name, sorted(self._items)) from None

    def __setitem__(self, name: str, item: T) -> None:
        self.register(name, item)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._items)})"

    def discover(self) -> list[ModuleType]:
        """Import every module of the registry's package, the first time only, in name
        order; return the modules imported (none on later calls)."""
        if self._discovered or self.package is None:
            return []
        self._discovered = True  # before importing: a module may look items up
        try:
            package = importlib.import_module(self.package)
            return [
                importlib.import_module(f"{self.package}.{module.name}")
                for module in pkgutil.iter_modules(package.__path__)
            ]
        except BaseException:
            self._discovered = False  # a module that failed to import is tried again
            raise
