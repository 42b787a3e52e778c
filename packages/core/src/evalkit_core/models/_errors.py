"""Errors of the model layer that a user can cause (a bad registry, a missing key, a spent budget, a failing
call)."""

from __future__ import annotations

from decimal import Decimal

from evalkit_core._errors import ConfigError, EvalkitError

__all__ = ["BudgetExceeded", "MissingKeyError", "ModelError", "RegistryError"]


class RegistryError(ConfigError):
    """A registry file is missing, is not TOML, or an entry has a missing or malformed field."""


class MissingKeyError(EvalkitError):
    """The environment variable holding a model's API key is unset or empty. Raised before any request."""

    def __init__(self, model_id: str, env_var: str) -> None:
        super().__init__(
            f"model {model_id!r}: environment variable {env_var} is not set; "
            f"export {env_var}=... (the registry entry's api_key_env names it)"
        )
        self.model_id = model_id
        self.env_var = env_var


class BudgetExceeded(EvalkitError):  # noqa: N818 - the name the design uses
    """A call was refused because its worst-case cost would take spend plus reservations past the cap.

    ``scope`` is None for the global cap, else the name of the :class:`BudgetScope` that refused (a
    campaign's own budget)."""

    def __init__(
        self,
        model_id: str,
        *,
        cap: Decimal,
        spent: Decimal,
        reserved: Decimal,
        needed: Decimal,
        scope: str | None = None,
    ) -> None:
        how = "raise it with `evalkit budget set`" if scope is None else "raise it"
        what = "budget cap" if scope is None else f"{scope} budget"
        super().__init__(
            f"model {model_id!r}: {what} ${cap} would be crossed: spent ${spent} + reserved ${reserved} "
            f"+ this call's worst case ${needed} > ${cap}; {how}"
        )
        self.model_id = model_id
        self.cap = cap
        self.spent = spent
        self.reserved = reserved
        self.needed = needed
        self.scope = scope

    @property
    def transient(self) -> bool:
        """True when only reservations in flight stand in the way: the call would fit once they settle."""
        return self.spent + self.needed <= self.cap


class ModelError(EvalkitError):
    """A model call failed: a non-retryable reply, a malformed reply, or retries exhausted.

    ``attempts`` is how many requests were made; the message says it too.
    """

    def __init__(
        self,
        model_id: str,
        reason: str,
        *,
        attempts: int,
        status_code: int | None = None,
        call_id: str | None = None,
        charged: Decimal = Decimal(0),
    ) -> None:
        noun = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"model {model_id!r}: {reason} (after {attempts} {noun})")
        self.model_id = model_id
        self.reason = reason
        self.attempts = attempts
        self.status_code = status_code
        self.call_id = call_id
        self.charged = charged  # what the budget was charged for the failed call
