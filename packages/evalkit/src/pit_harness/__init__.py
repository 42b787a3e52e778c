"""pit_harness: the public face of evalkit's point-in-time harness.

    from pit_harness import Bundle, RunConfig, load_prices, run
    from pit_harness.adapters.plain import from_callable

Names load on first use (an agent process imports the adapters without the rest of the harness).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.pit import AgentReply, Prices, RunConfig, RunResult, Toolbox, load_prices, run
    from evalkit_core import Release as Bundle

_LAZY: dict[str, tuple[str, str]] = {
    "AgentReply": ("evalkit.pit", "AgentReply"),
    "Bundle": ("evalkit_core", "Release"),
    "Prices": ("evalkit.pit", "Prices"),
    "RunConfig": ("evalkit.pit", "RunConfig"),
    "RunResult": ("evalkit.pit", "RunResult"),
    "Toolbox": ("evalkit.pit", "Toolbox"),
    "load_prices": ("evalkit.pit", "load_prices"),
    "run": ("evalkit.pit", "run"),
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'pit_harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = ["AgentReply", "Bundle", "Prices", "RunConfig", "RunResult", "Toolbox", "load_prices", "run"]
