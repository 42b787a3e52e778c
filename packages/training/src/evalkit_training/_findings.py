"""The reward-hacking checks' vocabulary: the checks, a finding (which check, static or dynamic, the evidence)
and a rollout's report (see :mod:`evalkit_training._hacking`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

import attrs

from evalkit import JSON

__all__ = ["CHECKS", "Check", "Finding", "HackingReport", "dedupe"]


Check = Literal[
    "early_exit",
    "writes_outside",
    "reads_forbidden",
    "eq_override",
    "frame_inspection",
    "monkeypatch",
    "special_casing",
    "public_only",
]
CHECKS: tuple[Check, ...] = get_args(Check)  # one list: the Literal


@attrs.frozen
class Finding:
    check: Check
    source: Literal["static", "dynamic"]
    evidence: str

    def __str__(self) -> str:
        return f"{self.source}: {self.evidence}"


@attrs.frozen
class HackingReport:
    findings: tuple[Finding, ...] = ()

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    @property
    def tripped(self) -> tuple[Check, ...]:
        return tuple(c for c in CHECKS if any(f.check == c for f in self.findings))

    def flags(self) -> dict[str, JSON]:
        """Every check by name, True when tripped (a fixed set of boolean columns)."""
        return {c: any(f.check == c for f in self.findings) for c in CHECKS}

    def details(self) -> dict[str, JSON]:
        """Every check by name, the evidence ('' when not tripped)."""
        return {c: "; ".join(str(f) for f in self.findings if f.check == c) for c in CHECKS}


def dedupe(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    # one finding per (check, source, evidence without the test name): a refusal repeated in every test is one
    seen: set[tuple[str, str, str]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.check, f.source, f.evidence.split(": ", 1)[-1])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return tuple(out)
