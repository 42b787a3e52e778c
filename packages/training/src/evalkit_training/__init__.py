"""evalkit_training: verifier rewards, reward-hacking checks and exports for fine-tuning.

The TRL reward function lives in the public submodule :mod:`evalkit_training.trl` (``reward``).
"""

from evalkit_training._export import (
    FORMATS,
    CampaignRollouts,
    ExportFormat,
    ExportSummary,
    RolloutRecord,
    ScoredRollout,
    campaign_rollouts,
    export_rows,
    score_rollouts,
    write_export,
)
from evalkit_training._hacking import (
    CHECKS,
    Finding,
    HackingReport,
    check_rollout,
    dynamic_findings,
    static_findings,
)
from evalkit_training._reward import (
    AdversarialSource,
    Grading,
    Reward,
    RewardComponents,
    RewardError,
    banked_adversarial,
    compute_reward,
    digest_of_tests,
    grade_rollouts,
    grading_from_json,
    no_adversarial,
    provenance,
)

__all__ = [
    "CHECKS",
    "FORMATS",
    "AdversarialSource",
    "CampaignRollouts",
    "ExportFormat",
    "ExportSummary",
    "Finding",
    "Grading",
    "HackingReport",
    "Reward",
    "RewardComponents",
    "RewardError",
    "RolloutRecord",
    "ScoredRollout",
    "banked_adversarial",
    "campaign_rollouts",
    "check_rollout",
    "compute_reward",
    "digest_of_tests",
    "dynamic_findings",
    "export_rows",
    "grade_rollouts",
    "grading_from_json",
    "no_adversarial",
    "provenance",
    "score_rollouts",
    "static_findings",
    "write_export",
]
