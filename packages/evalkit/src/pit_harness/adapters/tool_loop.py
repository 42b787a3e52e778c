"""``from_tool_loop(step)``: an agent from ``step(messages, tool_specs)`` returning an OpenAI-style message."""

from evalkit.pit import from_tool_loop

__all__ = ["from_tool_loop"]
