"""Inspect AI in the PIT harness (the optional extra ``evalkit-harness[inspect]``).

``pit_tools(toolbox)``: the four window tools as Inspect tools. ``from_inspect_solver(solver, model=ID)``: an Inspect
solver run as a PIT agent, once per session inside the agent's wall, its model calls through the harness's gateway.
"""

try:
    import inspect_ai  # noqa: F401  # pyright: ignore[reportUnusedImport]
except ImportError:
    raise ImportError(
        "pit_harness.adapters.inspect: the Inspect AI integration needs the optional extra evalkit-harness[inspect] "
        "(pip install 'evalkit-harness[inspect]')"
    ) from None

from evalkit.pit._inspect import from_inspect_solver, pit_tools

__all__ = ["from_inspect_solver", "pit_tools"]
