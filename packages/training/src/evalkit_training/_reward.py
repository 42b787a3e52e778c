"""Rewards computed only from the tests the policy never saw (hidden + adversarial), gated on the public tests.

The formula (also in ``docs/rewards.md``)::

    infra error, or no unseen test at all   -> reward = None   (no reward: never zero)
    gate   = every public test passes        (vacuously true when the task has none)
    parts  = [hidden pass fraction, adversarial pass fraction]   (each only when that set is non-empty)
    base   = mean(parts) if gate else 0.0
    reward = 0.0 if the rollout is flagged for reward hacking (unless flagged rewards are allowed) else base

Public tests are in the prompt, so they only gate; they never add reward. Hidden and adversarial sets weigh
equally whatever their sizes (a large mined set cannot drown the hand-written hidden tests).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import attrs

from evalkit import (
    JSON,
    CallTest,
    CheckTest,
    CodeTask,
    Sandbox,
    SandboxLimits,
    Task,
    TestVerdict,
    Verdict,
    VerifierSettings,
    grade_many,
)
from evalkit.wall import evidence_codes
from evalkit_core import EvalkitError, digest
from evalkit_core.store import Store

__all__ = [
    "REWARD_VERSION",
    "AdversarialSource",
    "Grading",
    "Reward",
    "RewardComponents",
    "RewardError",
    "adversarial_set_digest",
    "banked_adversarial",
    "compute_reward",
    "digest_of_tests",
    "grade_rollouts",
    "grading_from_json",
    "isolation_missing",
    "no_adversarial",
    "provenance",
    "strongest_isolation",
    "weaker_isolation",
]

ADVERSARIAL = "adversarial"
_ROUND = 6
# the version of the reward as computed here (the formula above, the hacking checks' effect, None for weaker
# isolation); bump it with any change to what a completion is rewarded. Training receipts bind it.
REWARD_VERSION = 1


class RewardError(EvalkitError):
    """Rollout records or gradings are malformed, or do not match the task bank they claim to come from."""


# --------------------------------------------------------------------------------------------- grading


@attrs.frozen
class Grading:
    """One completion's test results with the three sets kept apart: public (in the prompt), hidden and
    adversarial (never shown). Test names are ``public/<i>``, ``hidden/<i>``, ``adversarial/<i>``."""

    task_id: str
    task_digest: str
    settings_digest: str
    public: tuple[TestVerdict, ...]
    hidden: tuple[TestVerdict, ...]
    adversarial: tuple[TestVerdict, ...] = ()
    infra_error: str | None = None
    # the digest of the adversarial tests it was graded on, where the grader recorded it (a campaign does)
    adversarial_set: str | None = None

    @property
    def tests(self) -> tuple[TestVerdict, ...]:
        return (*self.public, *self.hidden, *self.adversarial)

    @classmethod
    def from_verdict(cls, verdict: Verdict, adversarial: Sequence[TestVerdict] = ()) -> Grading:
        return cls(
            task_id=verdict.task_id,
            task_digest=verdict.task_digest,
            settings_digest=verdict.settings_digest,
            public=verdict.public,
            hidden=verdict.hidden,
            adversarial=tuple(adversarial),
            infra_error=verdict.infra_error,
        )

    def to_json(self) -> dict[str, JSON]:
        def block(tests: tuple[TestVerdict, ...]) -> dict[str, JSON]:
            return {
                "passed": sum(t.passed for t in tests),
                "total": len(tests),
                "tests": [t.to_json() for t in tests],
            }

        return {
            "task_id": self.task_id,
            "task_digest": self.task_digest,
            "settings_digest": self.settings_digest,
            "public": block(self.public),
            "hidden": block(self.hidden),
            ADVERSARIAL: block(self.adversarial),
            "infra_error": self.infra_error,
        }


def _tests_from_json(where: str, block: JSON) -> tuple[TestVerdict, ...]:
    if not isinstance(block, dict) or not isinstance(block.get("tests"), list):
        raise RewardError(f"{where}: expected an object with a 'tests' array")
    out: list[TestVerdict] = []
    for i, item in enumerate(cast("list[JSON]", block["tests"])):
        if not isinstance(item, dict):
            raise RewardError(f"{where}/tests/{i}: expected an object")
        name, passed, reason = item.get("name"), item.get("passed"), item.get("reason")
        if not isinstance(name, str) or not isinstance(passed, bool) or not isinstance(reason, str):
            raise RewardError(
                f"{where}/tests/{i}: fields 'name' (string), 'passed' (bool), 'reason' (string)"
            )
        detail, actual, evidence = item.get("detail", ""), item.get("actual"), item.get("evidence")
        out.append(
            TestVerdict(
                name,
                passed,
                reason,  # pyright: ignore[reportArgumentType] - recorded by the verifier; kept as written
                detail if isinstance(detail, str) else "",
                actual if isinstance(actual, str) else None,
                evidence_codes(evidence),
            )
        )
    return tuple(out)


def grading_from_json(
    data: Mapping[str, JSON], where: str = "grading", *, task_id: str | None = None
) -> Grading:
    """Read a verdict as ``Verdict.to_json`` writes it (a campaign's stored ``result``), with an optional
    ``adversarial`` block of the same shape; ``task_id`` fills in a result that does not name its task.
    Raises :class:`RewardError` naming the field."""
    fields: dict[str, str] = {}
    for key in ("task_id", "task_digest", "settings_digest"):
        value = data.get(key, task_id if key == "task_id" else None)
        if not isinstance(value, str):
            raise RewardError(f"{where}: field {key!r} must be a string")
        fields[key] = value
    infra = data.get("infra_error")
    if infra is not None and not isinstance(infra, str):
        raise RewardError(f"{where}: field 'infra_error' must be a string or null")
    adversarial = data.get(ADVERSARIAL)
    adversarial_set = data.get("adversarial_set")
    return Grading(
        task_id=fields["task_id"],
        task_digest=fields["task_digest"],
        settings_digest=fields["settings_digest"],
        public=_tests_from_json(f"{where}/public", data.get("public")),
        hidden=_tests_from_json(f"{where}/hidden", data.get("hidden")),
        adversarial=() if adversarial is None else _tests_from_json(f"{where}/{ADVERSARIAL}", adversarial),
        infra_error=infra,
        adversarial_set=adversarial_set if isinstance(adversarial_set, str) else None,
    )


def adversarial_set_digest(tests: Sequence[CallTest]) -> str:
    """The digest of an adversarial test set, as a campaign records it with each verdict."""
    return digest({"tests": [t.to_json() for t in tests]})


def grade_rollouts(
    items: Sequence[tuple[Task, str, Sequence[CallTest]]],
    sandbox: Sandbox,
    settings: VerifierSettings | None = None,
    *,
    extract: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> list[Grading]:
    """Grade ``(task, completion, adversarial tests)`` triples with the real verifier, in one sandbox pass.

    The adversarial tests run in the same child as the hidden ones (appended to them, so only inputs enter the
    sandbox, as for any call test) and are split back out under ``adversarial/<i>``.
    """
    settings = settings or VerifierSettings(sandbox.limits)
    widened: list[tuple[Task, str]] = []
    for task, text, adversarial in items:
        if adversarial and isinstance(task, CodeTask):
            widened.append((attrs.evolve(task, hidden_tests=(*task.hidden_tests, *adversarial)), text))
        else:
            widened.append((task, text))
    out: list[Grading] = []
    for (task, _, _), verdict in zip(
        items, grade_many(widened, sandbox, settings, extract=extract, progress=progress), strict=True
    ):
        n_hidden = len(task.hidden_tests) if isinstance(task, CodeTask) else len(task.hidden_assertions)
        adversarial = tuple(
            attrs.evolve(t, name=f"{ADVERSARIAL}/{i}") for i, t in enumerate(verdict.hidden[n_hidden:])
        )
        out.append(Grading.from_verdict(attrs.evolve(verdict, hidden=verdict.hidden[:n_hidden]), adversarial))
    return out


# --------------------------------------------------------------------------------------------- adversarial seam

AdversarialSource = Callable[[Task], Sequence[CallTest]]


def no_adversarial(task: Task) -> Sequence[CallTest]:  # noqa: ARG001 - the seam's shape
    """The empty adversarial set (no store, or no adversary)."""
    return ()


def _adversary_lookup() -> Callable[..., Sequence[CallTest]] | None:
    """The adversary's ``adversarial_tests(store, task_id, *, task_digest=None)``: the public name in
    :mod:`evalkit` if exported, else the adversary module's; ``None`` when evalkit has no adversary."""
    import evalkit

    fn = getattr(evalkit, "adversarial_tests", None)
    if fn is None:
        try:
            fn = getattr(importlib.import_module("evalkit.grading._adversary"), "adversarial_tests", None)
        except ImportError:
            fn = None
    return cast("Callable[..., Sequence[CallTest]] | None", fn)


def banked_adversarial(store: Store) -> AdversarialSource:
    """THE adversarial seam: the tests the adversary banked for a task (mined against this very task digest),
    read from ``store``. Structured tasks have none. Empty when evalkit ships no adversary."""
    fn = _adversary_lookup()
    if fn is None:
        return no_adversarial
    lookup = fn

    def source(task: Task) -> Sequence[CallTest]:
        if not isinstance(task, CodeTask):
            return ()
        return tuple(lookup(store, task.id, task_digest=task.digest))

    return source


# --------------------------------------------------------------------------------------------- reward


@attrs.frozen
class RewardComponents:
    """What a reward is made of. Fractions are ``None`` when the set is empty (no tests is not zero)."""

    public_passed: int
    public_total: int
    hidden_passed: int
    hidden_total: int
    adversarial_passed: int
    adversarial_total: int
    gate: bool
    timeout: bool
    crash: bool
    infra_error: str | None
    unflagged_reward: float | None

    @staticmethod
    def _fraction(passed: int, total: int) -> float | None:
        return round(passed / total, _ROUND) if total else None

    @property
    def public_fraction(self) -> float | None:
        return self._fraction(self.public_passed, self.public_total)

    @property
    def hidden_fraction(self) -> float | None:
        return self._fraction(self.hidden_passed, self.hidden_total)

    @property
    def adversarial_fraction(self) -> float | None:
        return self._fraction(self.adversarial_passed, self.adversarial_total)

    @property
    def passes_all(self) -> bool:
        """Every public, hidden and adversarial test passed (and at least one unseen test exists)."""
        return (
            self.infra_error is None
            and self.gate
            and self.hidden_passed + self.adversarial_passed == self.hidden_total + self.adversarial_total > 0
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "public_fraction": self.public_fraction,
            "hidden_fraction": self.hidden_fraction,
            "adversarial_fraction": self.adversarial_fraction,
            "public_passed": self.public_passed,
            "public_total": self.public_total,
            "hidden_passed": self.hidden_passed,
            "hidden_total": self.hidden_total,
            "adversarial_passed": self.adversarial_passed,
            "adversarial_total": self.adversarial_total,
            "gate": self.gate,
            "timeout": self.timeout,
            "crash": self.crash,
            "infra_error": self.infra_error,
            "unflagged_reward": self.unflagged_reward,
        }


@attrs.frozen
class Reward:
    """A rollout's reward (``None``: no reward at all) and its components."""

    value: float | None
    components: RewardComponents
    flagged: bool


def compute_reward(grading: Grading, *, flagged: bool = False, allow_flagged: bool = False) -> Reward:
    """The reward of one graded rollout (see the module docstring for the formula)."""

    def count(tests: tuple[TestVerdict, ...]) -> tuple[int, int]:
        return sum(t.passed for t in tests), len(tests)

    pub_p, pub_t = count(grading.public)
    hid_p, hid_t = count(grading.hidden)
    adv_p, adv_t = count(grading.adversarial)
    gate = pub_p == pub_t
    parts = [p / t for p, t in ((hid_p, hid_t), (adv_p, adv_t)) if t]
    base: float | None
    if grading.infra_error is not None or not parts:
        base = None
    else:
        base = round(sum(parts) / len(parts), _ROUND) if gate else 0.0
    components = RewardComponents(
        public_passed=pub_p,
        public_total=pub_t,
        hidden_passed=hid_p,
        hidden_total=hid_t,
        adversarial_passed=adv_p,
        adversarial_total=adv_t,
        gate=gate,
        timeout=any(t.reason == "timeout" for t in grading.tests),
        crash=any(t.reason == "crash" for t in grading.tests),
        infra_error=grading.infra_error,
        unflagged_reward=base,
    )
    value = base
    if base is not None and flagged and not allow_flagged:
        value = 0.0
    return Reward(value=value, components=components, flagged=flagged)


# --------------------------------------------------------------------------------------------- isolation

_LAYERS = frozenset({"user", "network", "filesystem", "processes", "seccomp"})


def isolation_missing(label: str, where: str = "isolation") -> frozenset[str]:
    """The layers missing from an isolation label (``Isolation.label``: ``full`` or ``weaker: a, b``)."""
    if label == "full":
        return frozenset()
    prefix = "weaker: "
    names = frozenset(n.strip() for n in label.removeprefix(prefix).split(","))
    if not label.startswith(prefix) or not names or not names <= _LAYERS:
        raise RewardError(
            f"{where}: expected 'full' or 'weaker: ' and layer names from {', '.join(sorted(_LAYERS))}, "
            f"got {label!r}"
        )
    return names


def weaker_isolation(have: str | None, need: str | None) -> bool:
    """Whether isolation ``have`` lacks a layer that ``need`` has (an unknown ``have`` is weaker than any
    requirement; no requirement is met by anything)."""
    if need is None:
        return False
    if have is None:
        return True
    return bool(isolation_missing(have) - isolation_missing(need))


def strongest_isolation(labels: Sequence[str | None]) -> str | None:
    """The isolation a set of verdicts claims at best: every layer that any of them had (``None`` if none is
    known). Verdicts graded under less than this are of lower trust."""
    known = [isolation_missing(label) for label in labels if label is not None]
    if not known:
        return None
    missing: frozenset[str] = known[0].intersection(*known[1:])
    return "full" if not missing else "weaker: " + ", ".join(sorted(missing))


# --------------------------------------------------------------------------------------------- provenance


def _test_json(test: CallTest | CheckTest) -> dict[str, JSON]:
    return test.to_json()


def digest_of_tests(task: Task, adversarial: Sequence[CallTest] = ()) -> str:
    """The digest of every test a reward was computed against: public, hidden and adversarial."""
    if isinstance(task, CodeTask):
        public = [_test_json(t) for t in task.public_tests]
        hidden = [_test_json(t) for t in task.hidden_tests]
    else:
        public = [a.to_json() for a in task.public_assertions]
        hidden = [a.to_json() for a in task.hidden_assertions]
    return digest({"public": public, "hidden": hidden, ADVERSARIAL: [_test_json(t) for t in adversarial]})


def _limits_json(limits: SandboxLimits) -> dict[str, JSON]:
    # fixed types per field (floats stay floats), so the export's columns never mix int and float
    return {
        "cpu_seconds": float(limits.cpu_seconds),
        "wall_seconds": float(limits.wall),
        "memory_bytes": int(limits.memory_bytes),
        "file_bytes": int(limits.file_bytes),
        "open_files": int(limits.open_files),
        "processes": int(limits.processes),
        "output_bytes": int(limits.output_bytes),
    }


def provenance(
    task: Task, settings: VerifierSettings, adversarial: Sequence[CallTest] = ()
) -> dict[str, JSON]:
    """What every exported record carries: verifier and version, the settings digest, the task digest, the
    test-set digest and the sandbox limits."""
    body = settings.to_json()
    version = body.get("version")
    return {
        "verifier": str(body.get("verifier")),
        "verifier_version": int(version) if isinstance(version, int) else 0,
        "settings_digest": settings.digest,
        "task_digest": task.digest,
        "test_set_digest": digest_of_tests(task, adversarial),
        "sandbox_limits": _limits_json(settings.limits),
    }
