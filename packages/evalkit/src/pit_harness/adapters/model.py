"""``from_model("<model id>")``: a ready agent that uses the tool loop through the harness's model gateway."""

from evalkit.pit import from_model

__all__ = ["from_model"]
