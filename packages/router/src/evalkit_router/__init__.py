"""evalkit_router: campaigns (fan-out, resume, grading, reports and receipts), calibration and cost-aware
routing."""

from typing import TYPE_CHECKING

from evalkit_core._lazy import lazy_exports

if TYPE_CHECKING:
    from evalkit_router._campaign import (
        LostCall,
        PlannedRollout,
        ProgressFn,
        RunOutcome,
        adversarial_set,
        plan_rollouts,
        rollout_key,
        run_campaign,
        run_campaign_async,
    )
    from evalkit_router._config import (
        CampaignConfig,
        load_campaign,
        select_tasks,
    )
    from evalkit_router._errors import CampaignChangedError, CampaignError
    from evalkit_router._integrity import CampaignIntegrityError, check_rollout_costs
    from evalkit_router._report import (
        CampaignReport,
        ReceiptCheck,
        campaign_report,
        default_out_dir,
        digest_of_rows,
        pass_at_k,
        render_table,
        summarize_results,
        summary_intervals,
        verify_campaign_receipt,
        write_campaign_outputs,
    )
    from evalkit_router._route import (
        Calibration,
        LiveDecision,
        ModelQuality,
        RouteOutcome,
        RoutingReport,
        calibrate,
        family_of,
        route_live,
        route_order,
        simulate_routing,
        split_tasks,
        sweep,
        wilson_lower_bound,
    )
    from evalkit_router._status import CampaignStatus, campaign_label, campaign_status, require_store

# Names load on first use (PEP 562), so a command that needs one corner of the campaign layer (``campaign status``
# reads two tables) does not import the grading stack, the fuzzer and the model client to get it.
_LAZY: dict[str, str] = {
    "CampaignStatus": "evalkit_router._status",
    "LostCall": "evalkit_router._campaign",
    "PlannedRollout": "evalkit_router._campaign",
    "ProgressFn": "evalkit_router._campaign",
    "RunOutcome": "evalkit_router._campaign",
    "adversarial_set": "evalkit_router._campaign",
    "campaign_label": "evalkit_router._status",
    "campaign_status": "evalkit_router._status",
    "require_store": "evalkit_router._status",
    "plan_rollouts": "evalkit_router._campaign",
    "rollout_key": "evalkit_router._campaign",
    "run_campaign": "evalkit_router._campaign",
    "run_campaign_async": "evalkit_router._campaign",
    "CampaignChangedError": "evalkit_router._errors",
    "CampaignConfig": "evalkit_router._config",
    "CampaignError": "evalkit_router._errors",
    "load_campaign": "evalkit_router._config",
    "select_tasks": "evalkit_router._config",
    "CampaignIntegrityError": "evalkit_router._integrity",
    "check_rollout_costs": "evalkit_router._integrity",
    "CampaignReport": "evalkit_router._report",
    "ReceiptCheck": "evalkit_router._report",
    "campaign_report": "evalkit_router._report",
    "default_out_dir": "evalkit_router._report",
    "digest_of_rows": "evalkit_router._report",
    "pass_at_k": "evalkit_router._report",
    "render_table": "evalkit_router._report",
    "summarize_results": "evalkit_router._report",
    "summary_intervals": "evalkit_router._report",
    "verify_campaign_receipt": "evalkit_router._report",
    "write_campaign_outputs": "evalkit_router._report",
    "Calibration": "evalkit_router._route",
    "LiveDecision": "evalkit_router._route",
    "ModelQuality": "evalkit_router._route",
    "RouteOutcome": "evalkit_router._route",
    "RoutingReport": "evalkit_router._route",
    "calibrate": "evalkit_router._route",
    "family_of": "evalkit_router._route",
    "route_live": "evalkit_router._route",
    "route_order": "evalkit_router._route",
    "simulate_routing": "evalkit_router._route",
    "split_tasks": "evalkit_router._route",
    "sweep": "evalkit_router._route",
    "wilson_lower_bound": "evalkit_router._route",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "Calibration",
    "CampaignChangedError",
    "CampaignConfig",
    "CampaignError",
    "CampaignIntegrityError",
    "CampaignReport",
    "CampaignStatus",
    "LiveDecision",
    "LostCall",
    "ModelQuality",
    "PlannedRollout",
    "ProgressFn",
    "ReceiptCheck",
    "RouteOutcome",
    "RoutingReport",
    "RunOutcome",
    "adversarial_set",
    "calibrate",
    "campaign_label",
    "campaign_report",
    "campaign_status",
    "check_rollout_costs",
    "default_out_dir",
    "digest_of_rows",
    "family_of",
    "load_campaign",
    "pass_at_k",
    "plan_rollouts",
    "render_table",
    "require_store",
    "rollout_key",
    "route_live",
    "route_order",
    "run_campaign",
    "run_campaign_async",
    "select_tasks",
    "simulate_routing",
    "split_tasks",
    "summarize_results",
    "summary_intervals",
    "sweep",
    "verify_campaign_receipt",
    "wilson_lower_bound",
    "write_campaign_outputs",
]
