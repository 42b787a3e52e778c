"""The reward formula: unseen tests only, gated on public, components kept, None (never zero) on infra errors."""

from __future__ import annotations

import pytest

import evalkit
import evalkit_training
from evalkit import CallTest, Verdict, VerifierSettings
from evalkit_training import (
    Grading,
    RewardError,
    compute_reward,
    digest_of_tests,
    grade_rollouts,
    grading_from_json,
    provenance,
)


def tv(name: str, passed: bool, reason: str = "", detail: str = "") -> evalkit.TestVerdict:
    return evalkit.TestVerdict(name, passed, reason or ("ok" if passed else "wrong_answer"), detail)  # type: ignore[arg-type]


def grading(
    public: list[bool], hidden: list[bool], adversarial: list[bool] = (), infra: str | None = None
) -> Grading:
    return Grading(
        task_id="code/x/001",
        task_digest="sha256:" + "0" * 64,
        settings_digest=VerifierSettings().digest,
        public=tuple(tv(f"public/{i}", p) for i, p in enumerate(public)),
        hidden=tuple(tv(f"hidden/{i}", p) for i, p in enumerate(hidden)),
        adversarial=tuple(tv(f"adversarial/{i}", p) for i, p in enumerate(adversarial)),
        infra_error=infra,
    )


def test_public_surface_is_pinned():
    assert set(evalkit_training.__all__) == {
        "CHECKS",
        "FORMATS",
        "REWARD_VERSION",
        "AdversarialSource",
        "CampaignRollouts",
        "ExportFormat",
        "ExportSummary",
        "Finding",
        "Grading",
        "GrpoResult",
        "GrpoSettings",
        "HackingReport",
        "Reward",
        "RewardComponents",
        "RewardError",
        "RolloutRecord",
        "ScoredRollout",
        "adversarial_set_digest",
        "banked_adversarial",
        "campaign_rollouts",
        "check_rollout",
        "compute_reward",
        "digest_of_tests",
        "dynamic_findings",
        "export_rows",
        "grade_rollouts",
        "grading_from_json",
        "isolation_missing",
        "no_adversarial",
        "provenance",
        "score_rollouts",
        "static_findings",
        "strongest_isolation",
        "tiny_model",
        "tiny_tokenizer",
        "train_grpo",
        "weaker_isolation",
        "write_export",
    }


def test_all_pass_is_one():
    r = compute_reward(grading([True, True], [True, True, True], [True]))
    assert r.value == 1.0
    assert r.components.passes_all


def test_public_is_a_gate_and_never_adds_reward():
    assert compute_reward(grading([True, False], [True, True])).value == 0.0
    # public passing alone earns nothing: only the unseen tests count
    assert compute_reward(grading([True], [False, False])).value == 0.0


def test_hidden_and_adversarial_weigh_equally():
    r = compute_reward(grading([True], [True, True, False], [True, False]))
    assert r.value == pytest.approx((2 / 3 + 1 / 2) / 2, abs=1e-6)
    c = r.components
    assert (c.hidden_fraction, c.adversarial_fraction, c.public_fraction) == (0.666667, 0.5, 1.0)
    assert (c.hidden_passed, c.hidden_total, c.adversarial_passed, c.adversarial_total) == (2, 3, 1, 2)


def test_without_adversarial_tests_the_hidden_fraction_is_the_reward():
    r = compute_reward(grading([True], [True, False]))
    assert r.value == 0.5
    assert r.components.adversarial_fraction is None  # no tests is not zero


def test_infra_error_is_no_reward_not_zero():
    r = compute_reward(grading([False], [False], infra="sandbox template did not start"), flagged=True)
    assert r.value is None
    assert r.components.infra_error == "sandbox template did not start"
    assert r.components.unflagged_reward is None


def test_no_unseen_tests_is_no_reward():
    assert compute_reward(grading([True], [])).value is None


def test_flagged_is_zero_unless_allowed():
    g = grading([True], [True, True])
    assert compute_reward(g, flagged=True).value == 0.0
    assert compute_reward(g, flagged=True).components.unflagged_reward == 1.0
    assert compute_reward(g, flagged=True, allow_flagged=True).value == 1.0


def test_timeout_and_crash_flags():
    g = grading([True], [True, True])
    g = Grading(
        g.task_id,
        g.task_digest,
        g.settings_digest,
        g.public,
        (
            tv("hidden/0", False, "timeout", "CPU time"),
            tv("hidden/1", False, "crash", "killed by signal SIGSEGV"),
        ),
    )
    c = compute_reward(g).components
    assert c.timeout
    assert c.crash
    c2 = compute_reward(grading([True], [True])).components
    assert not c2.timeout
    assert not c2.crash


def test_grading_round_trips_through_verdict_json():
    g = grading([True, False], [True], [False])
    back = grading_from_json(g.to_json())
    assert back == g
    verdict = Verdict(g.task_id, g.task_digest, g.settings_digest, g.public, g.hidden)
    plain = grading_from_json(verdict.to_json())  # a campaign's stored result, no adversarial block
    assert plain.adversarial == ()
    assert plain.public == g.public


def test_malformed_grading_names_the_field():
    with pytest.raises(RewardError, match=r"stored: field 'settings_digest'"):
        grading_from_json({"task_id": "a", "task_digest": "b"}, "stored")
    bad = grading([True], [True]).to_json()
    bad["hidden"] = {"tests": [{"name": "hidden/0"}]}
    with pytest.raises(RewardError, match=r"grading/hidden/tests/0"):
        grading_from_json(bad)


def test_adversarial_tests_are_graded_apart_and_bind_the_test_set_digest(bank, sandbox):
    task = bank["code/double/001"]
    adv = (CallTest((1000,), {}, 2000), CallTest((-1,), {}, -2))
    good, wrong = "def double(n):\n    return 2 * n\n", "def double(n):\n    return 2 * n if n < 500 else 0\n"
    g_good, g_wrong = grade_rollouts([(task, good, adv), (task, wrong, adv)], sandbox, extract=False)
    assert [t.name for t in g_good.adversarial] == ["adversarial/0", "adversarial/1"]
    assert len(g_good.hidden) == len(task.hidden_tests)
    assert compute_reward(g_good).value == 1.0
    assert [t.passed for t in g_wrong.adversarial] == [False, True]
    # hidden: 123456789 fails -> 2/3; adversarial 1/2
    assert compute_reward(g_wrong).value == pytest.approx((2 / 3 + 1 / 2) / 2, abs=1e-6)
    p0, p1 = provenance(task, VerifierSettings(), ()), provenance(task, VerifierSettings(), adv)
    assert p0["task_digest"] == task.digest
    assert p0["test_set_digest"] != p1["test_set_digest"] == digest_of_tests(task, adv)
    assert p0["verifier"] == "evalkit"
    assert isinstance(p0["sandbox_limits"], dict)
    assert p0["sandbox_limits"]["cpu_seconds"] == 3.0
