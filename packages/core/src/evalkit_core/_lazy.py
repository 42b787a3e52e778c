"""Names a package exports but imports on first use, so importing the package (and ``evalkit --help``) stays fast."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package``: ``table`` maps each lazy name to the module that
    defines it. A name is imported once and then kept in the package's namespace; an unknown name raises the
    usual AttributeError. ``__dir__`` lists the package's ``__all__``."""

    def getattr_(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(getattr(sys.modules[package], "__all__", ()))

    return getattr_, dir_
