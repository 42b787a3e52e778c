"""Adapters that turn user code into PIT agents: ``plain`` (a function) and ``tool_loop`` (a chat model step)."""

__all__: list[str] = []
