"""The campaign layer's errors (a user error each: one line, exit 2)."""

from __future__ import annotations

from evalkit_core import EvalkitError

__all__ = ["CampaignChangedError", "CampaignError"]


class CampaignError(EvalkitError):
    """A campaign file is malformed, names something that does not exist, or a campaign cannot be found."""


class CampaignChangedError(CampaignError):
    """The campaign file changed under the same name; the message lists what changed."""
