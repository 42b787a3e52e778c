"""The four PIT tools as OpenAI-style function specs: plain data, light to import (agent processes need it
without the toolbox, which needs polars)."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_LIMIT", "TOOL_NAMES", "tool_specs"]

TOOL_NAMES = ("pit_list", "pit_search", "pit_read", "pit_coverage")
MAX_LIMIT = 200


def tool_specs() -> list[dict[str, Any]]:
    """OpenAI-style function specs for the four tools (and nothing else)."""
    return [
        {
            "type": "function",
            "function": {
                "name": "pit_list",
                "description": "List filings knowable at this session's opening bell, newest first.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 20},
                        "offset": {"type": "integer", "minimum": 0, "default": 0},
                        "form": {"type": "string", "description": "Only this form type, e.g. 8-K."},
                    },
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "pit_search",
                "description": "Search issuer and title text of knowable filings (case-insensitive substring), newest first.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 20},
                    },
                    "required": ["query"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "pit_read",
                "description": "Read one filing by row_key, if it is knowable at this session.",
                "parameters": {
                    "type": "object",
                    "properties": {"row_key": {"type": "string"}},
                    "required": ["row_key"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "pit_coverage",
                "description": "Counts by form and date of what is knowable now, and acceptance-stamp coverage.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
