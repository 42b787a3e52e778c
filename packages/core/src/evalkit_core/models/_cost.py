"""Exact cost arithmetic: ``decimal.Decimal`` throughout, never float."""

from __future__ import annotations

import decimal
from decimal import Decimal

from evalkit_core.models._registry import ModelEntry, Prices
from evalkit_core.models._types import Usage

__all__ = ["PER_MILLION", "cost_of", "plain", "worst_case_cost"]

PER_MILLION = Decimal(1_000_000)
# Enough digits that no product or sum of realistic prices and token counts is ever rounded.
_CONTEXT = decimal.Context(prec=60, traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow])


def cost_of(usage: Usage, prices: Prices) -> Decimal:
    """USD for ``usage`` at ``prices`` (per million tokens), exact to the last digit.

    The Inexact trap makes a rounding raise instead of silently losing a digit.
    """
    c = _CONTEXT
    total = c.add(
        c.add(
            c.multiply(Decimal(usage.input_tokens), prices.input),
            c.multiply(Decimal(usage.output_tokens), prices.output),
        ),
        c.add(
            c.multiply(Decimal(usage.cache_read_tokens), prices.cache_read),
            c.multiply(Decimal(usage.cache_write_tokens), prices.cache_write),
        ),
    )
    return plain(c.divide(total, PER_MILLION))


def plain(value: Decimal) -> Decimal:
    """``value`` without trailing zeros and never in exponent form: ``Decimal("1.50")`` -> ``1.5``, ``10`` ->
    ``10``."""
    if not value:
        return Decimal(0)
    v = value.normalize(_CONTEXT)
    exponent = v.as_tuple().exponent
    if isinstance(exponent, int) and exponent > 0:
        v = v.quantize(Decimal(1), context=_CONTEXT)
    return v


def worst_case_cost(entry: ModelEntry, request_bytes: int, max_tokens: int) -> Decimal:
    """The most a call can cost: every request byte billed as an input token at the dearest input price, plus
    the
    entry's overhead tokens, plus ``max_tokens`` output tokens. (A token is never shorter than one byte of the
    UTF-8 request, so bytes bound tokens from above.)"""
    usage = Usage(input_tokens=0, output_tokens=max_tokens)
    c = _CONTEXT
    worst_in = c.divide(
        c.multiply(Decimal(request_bytes + entry.reserve_overhead_tokens), entry.prices.max_input),
        PER_MILLION,
    )
    return plain(c.add(cost_of(usage, entry.prices), worst_in))
