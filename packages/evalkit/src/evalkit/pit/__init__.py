"""The point-in-time harness: run configuration, toolbox, agents, network guard, probe, scoring, receipts."""

from evalkit.pit._agents import (
    Agent,
    AgentReply,
    AgentSpecError,
    from_callable,
    from_tool_loop,
    resolve_agent,
    stub_agent,
)
from evalkit.pit._config import RunConfig, load_config
from evalkit.pit._export import EXPORT_FORMATS, export_samples, session_samples
from evalkit.pit._gateway import Gateway, GatewayError
from evalkit.pit._guard import EgressAttempt, NetworkBlocked, NetworkBlockedError, NetworkGuard, network_guard
from evalkit.pit._model_agent import from_model
from evalkit.pit._prices import Prices, PricesError, load_prices
from evalkit.pit._probe import choose_items, score_answer
from evalkit.pit._runner import RECEIPT_VERSION, RunResult, run
from evalkit.pit._toolbox import TOOL_NAMES, CellView, Toolbox, tool_specs
from evalkit.pit._verify import Check, receipt_schema, verify_pit_receipt

__all__ = [
    "EXPORT_FORMATS",
    "RECEIPT_VERSION",
    "TOOL_NAMES",
    "Agent",
    "AgentReply",
    "AgentSpecError",
    "CellView",
    "Check",
    "EgressAttempt",
    "Gateway",
    "GatewayError",
    "NetworkBlocked",
    "NetworkBlockedError",
    "NetworkGuard",
    "Prices",
    "PricesError",
    "RunConfig",
    "RunResult",
    "Toolbox",
    "choose_items",
    "export_samples",
    "from_callable",
    "from_model",
    "from_tool_loop",
    "load_config",
    "load_prices",
    "network_guard",
    "receipt_schema",
    "resolve_agent",
    "run",
    "score_answer",
    "session_samples",
    "stub_agent",
    "tool_specs",
    "verify_pit_receipt",
]
