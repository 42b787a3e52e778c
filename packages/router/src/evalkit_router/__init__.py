"""evalkit_router: campaigns (fan-out, resume, grading, reports and receipts); calibration and cost-aware routing
come in later issues."""

from evalkit_router._campaign import (
    CampaignStatus,
    PlannedRollout,
    ProgressFn,
    RunOutcome,
    adversarial_tests,
    campaign_status,
    plan_rollouts,
    rollout_key,
    run_campaign,
    run_campaign_async,
)
from evalkit_router._config import (
    CampaignChanged,
    CampaignConfig,
    CampaignError,
    load_campaign,
    select_tasks,
)
from evalkit_router._report import (
    CampaignReport,
    ReceiptCheck,
    campaign_report,
    default_out_dir,
    pass_at_k,
    render_table,
    summarize_results,
    verify_campaign_receipt,
    write_campaign_outputs,
)

__all__ = [
    "CampaignChanged",
    "CampaignConfig",
    "CampaignError",
    "CampaignReport",
    "CampaignStatus",
    "PlannedRollout",
    "ProgressFn",
    "ReceiptCheck",
    "RunOutcome",
    "adversarial_tests",
    "campaign_report",
    "campaign_status",
    "default_out_dir",
    "load_campaign",
    "pass_at_k",
    "plan_rollouts",
    "render_table",
    "rollout_key",
    "run_campaign",
    "run_campaign_async",
    "select_tasks",
    "summarize_results",
    "verify_campaign_receipt",
    "write_campaign_outputs",
]
