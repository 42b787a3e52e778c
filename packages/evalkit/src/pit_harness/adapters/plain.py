"""``from_callable(fn)``: an agent from ``fn(prompt, tools)`` returning a list of row_keys or a string."""

from evalkit.pit import from_callable

__all__ = ["from_callable"]
