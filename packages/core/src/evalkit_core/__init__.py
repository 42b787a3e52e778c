"""evalkit_core: canonical JSON and digests, receipts, releases, the trading calendar and clock policies.

Names that need polars or pandas (releases, clocks, the calendar) load on first use, so importing this package
(and so ``evalkit --help``) stays fast.
"""

import importlib
from typing import TYPE_CHECKING, Any

from evalkit_core._canonical import (
    canonical_bytes,
    digest,
    digest_bytes,
    file_digest,
    normalize,
)
from evalkit_core._errors import (
    CanonicalError,
    ConfigError,
    EvalkitError,
    ReceiptError,
    ReleaseError,
)

if TYPE_CHECKING:
    from evalkit_core._calendar import (
        CALENDAR_SPAN,
        Calendar,
        Session,
        is_sec_business_day,
        next_sec_business_day,
        next_session_after,
        nyse,
        sec_business_days,
        sessions,
        us_federal_holidays,
    )
    from evalkit_core._clocks import (
        CLOCKS,
        Clock,
        KnownAt,
        entry_session,
        known_at,
        parse_clock,
        with_entry,
    )
    from evalkit_core._receipt import (
        Binding,
        BindingResult,
        atomic_open,
        atomic_write_bytes,
        atomic_write_text,
        check_bindings,
        check_receipt,
        make_receipt,
        read_receipt,
        write_receipt,
    )
    from evalkit_core._release import (
        ANSWER_KEY_FILE,
        ARM_FILES,
        ARMS,
        MANIFEST_FILE,
        MASKS_FILE,
        RELEASE_FORMAT,
        SHIFT_YEARS,
        Filing,
        Masks,
        Release,
        ShiftMap,
        arm_rows,
        cache_dir,
        check_release,
        format_instant,
        parse_instant,
        row_key_for,
        row_key_secret,
        write_release,
    )

_LAZY: dict[str, str] = {
    "ANSWER_KEY_FILE": "evalkit_core._release",
    "ARMS": "evalkit_core._release",
    "ARM_FILES": "evalkit_core._release",
    "Binding": "evalkit_core._receipt",
    "BindingResult": "evalkit_core._receipt",
    "CALENDAR_SPAN": "evalkit_core._calendar",
    "CLOCKS": "evalkit_core._clocks",
    "Calendar": "evalkit_core._calendar",
    "Clock": "evalkit_core._clocks",
    "Filing": "evalkit_core._release",
    "KnownAt": "evalkit_core._clocks",
    "MANIFEST_FILE": "evalkit_core._release",
    "MASKS_FILE": "evalkit_core._release",
    "Masks": "evalkit_core._release",
    "ShiftMap": "evalkit_core._release",
    "row_key_secret": "evalkit_core._release",
    "RELEASE_FORMAT": "evalkit_core._release",
    "Release": "evalkit_core._release",
    "SHIFT_YEARS": "evalkit_core._release",
    "Session": "evalkit_core._calendar",
    "arm_rows": "evalkit_core._release",
    "atomic_open": "evalkit_core._receipt",
    "atomic_write_bytes": "evalkit_core._receipt",
    "atomic_write_text": "evalkit_core._receipt",
    "cache_dir": "evalkit_core._release",
    "check_bindings": "evalkit_core._receipt",
    "check_receipt": "evalkit_core._receipt",
    "check_release": "evalkit_core._release",
    "entry_session": "evalkit_core._clocks",
    "format_instant": "evalkit_core._release",
    "is_sec_business_day": "evalkit_core._calendar",
    "known_at": "evalkit_core._clocks",
    "make_receipt": "evalkit_core._receipt",
    "next_sec_business_day": "evalkit_core._calendar",
    "next_session_after": "evalkit_core._calendar",
    "nyse": "evalkit_core._calendar",
    "parse_clock": "evalkit_core._clocks",
    "parse_instant": "evalkit_core._release",
    "read_receipt": "evalkit_core._receipt",
    "row_key_for": "evalkit_core._release",
    "sec_business_days": "evalkit_core._calendar",
    "sessions": "evalkit_core._calendar",
    "us_federal_holidays": "evalkit_core._calendar",
    "with_entry": "evalkit_core._clocks",
    "write_receipt": "evalkit_core._receipt",
    "write_release": "evalkit_core._release",
}



def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ANSWER_KEY_FILE",
    "ARMS",
    "ARM_FILES",
    "CALENDAR_SPAN",
    "CLOCKS",
    "MANIFEST_FILE",
    "MASKS_FILE",
    "RELEASE_FORMAT",
    "SHIFT_YEARS",
    "Binding",
    "BindingResult",
    "Calendar",
    "CanonicalError",
    "Clock",
    "ConfigError",
    "EvalkitError",
    "Filing",
    "KnownAt",
    "Masks",
    "ReceiptError",
    "Release",
    "ReleaseError",
    "Session",
    "ShiftMap",
    "arm_rows",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "cache_dir",
    "canonical_bytes",
    "check_bindings",
    "check_receipt",
    "check_release",
    "digest",
    "digest_bytes",
    "entry_session",
    "file_digest",
    "format_instant",
    "is_sec_business_day",
    "known_at",
    "make_receipt",
    "next_sec_business_day",
    "next_session_after",
    "normalize",
    "nyse",
    "parse_clock",
    "parse_instant",
    "read_receipt",
    "row_key_for",
    "row_key_secret",
    "sec_business_days",
    "sessions",
    "us_federal_holidays",
    "with_entry",
    "write_receipt",
    "write_release",
]
