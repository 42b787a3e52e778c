"""Gates and certificates over the receipts of both products.

A gate (:func:`compare`, :func:`load_policy`) compares a run's receipt with a baseline under a policy and lists
each :class:`Violation` (a metric that dropped past its statistical tolerance, a check that no longer holds), for
PIT runs, evals and campaigns alike; a contamination certificate (:func:`certify_receipt`) is a signed in-toto
statement, issued only for a PIT receipt that verifies and whose run held the knowable boundary and the masks,
and checked offline by :func:`verify_certificate`.
"""

from typing import TYPE_CHECKING

from evalkit_core._lazy import lazy_exports

if TYPE_CHECKING:
    from evalkit.gates._certificate import (
        CERTIFICATE_VERSION,
        PAYLOAD_TYPE,
        PREDICATE_TYPE,
        STATEMENT_TYPE,
        CertificateRefusedError,
        certify_receipt,
        is_certificate,
        verify_certificate,
    )
    from evalkit.gates._gate import (
        BASELINE_FORMAT,
        PIT_FIELDS,
        RULES,
        GatePolicy,
        Violation,
        compare,
        drop_tolerance,
        load_baseline,
        load_policy,
        metrics_of,
        not_checked_for,
        pit_field,
        rules_for,
        wilson,
    )

_LAZY: dict[str, str] = {
    "BASELINE_FORMAT": "evalkit.gates._gate",
    "CERTIFICATE_VERSION": "evalkit.gates._certificate",
    "CertificateRefusedError": "evalkit.gates._certificate",
    "GatePolicy": "evalkit.gates._gate",
    "PAYLOAD_TYPE": "evalkit.gates._certificate",
    "PIT_FIELDS": "evalkit.gates._gate",
    "PREDICATE_TYPE": "evalkit.gates._certificate",
    "RULES": "evalkit.gates._gate",
    "STATEMENT_TYPE": "evalkit.gates._certificate",
    "Violation": "evalkit.gates._gate",
    "certify_receipt": "evalkit.gates._certificate",
    "compare": "evalkit.gates._gate",
    "drop_tolerance": "evalkit.gates._gate",
    "is_certificate": "evalkit.gates._certificate",
    "load_baseline": "evalkit.gates._gate",
    "load_policy": "evalkit.gates._gate",
    "metrics_of": "evalkit.gates._gate",
    "not_checked_for": "evalkit.gates._gate",
    "pit_field": "evalkit.gates._gate",
    "rules_for": "evalkit.gates._gate",
    "verify_certificate": "evalkit.gates._certificate",
    "wilson": "evalkit.gates._gate",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "BASELINE_FORMAT",
    "CERTIFICATE_VERSION",
    "PAYLOAD_TYPE",
    "PIT_FIELDS",
    "PREDICATE_TYPE",
    "RULES",
    "STATEMENT_TYPE",
    "CertificateRefusedError",
    "GatePolicy",
    "Violation",
    "certify_receipt",
    "compare",
    "drop_tolerance",
    "is_certificate",
    "load_baseline",
    "load_policy",
    "metrics_of",
    "not_checked_for",
    "pit_field",
    "rules_for",
    "verify_certificate",
    "wilson",
]
