"""The error types a user can cause. The CLI maps every one of them to one line on stderr and exit code 2."""

from __future__ import annotations

__all__ = ["CanonicalError", "ConfigError", "EvalkitError", "ReceiptError", "ReleaseError"]


class EvalkitError(Exception):
    """Base of every error a user can cause (bad config, bad release, bad prices, bad task).

    The message names the file, the field and what was expected. The CLI prints it as one line
    and exits with code 2; anything that is not an ``EvalkitError`` is a bug and shows its traceback.
    """


class CanonicalError(EvalkitError, ValueError):
    """A value cannot be put in canonical form (NaN, infinity, an integer beyond 2**53, a non-JSON type)."""


class ReceiptError(EvalkitError):
    """A receipt file is missing, malformed or does not match its own hash."""


class ReleaseError(EvalkitError):
    """A release directory is missing a file, has a malformed line, or does not match its digests."""


class ConfigError(EvalkitError):
    """A configuration value is missing or malformed."""
