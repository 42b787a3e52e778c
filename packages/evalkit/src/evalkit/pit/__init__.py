"""The point-in-time harness: an agent trades session by session over a frozen release, and a receipt proves how.

A run (:func:`run`, configured by :class:`RunConfig`) walks arms x clocks; for each cell the runner starts the agent
in a jail of its own (a :class:`~evalkit.wall.Zygote` of the wall, under the agent's policy), answers its tool
calls from a :class:`Toolbox` bound to the session's opening bell (what was not yet knowable is refused), serves
its model calls through the gateway (recorded, charged, capped), validates its picks, scores them against the
user's prices, asks the mask-leak probe, and writes a trajectory and a signed receipt that :func:`verify_pit_receipt`
replays offline. It uses the wall only through :mod:`evalkit.wall`'s public names and knows nothing of the grading
stack. Names load on first use, so that an agent process (which needs only the adapters) does not import polars.
"""

from typing import TYPE_CHECKING

from evalkit_core._lazy import lazy_exports

if TYPE_CHECKING:
    from evalkit.pit._agents import (
        Agent,
        AgentReply,
        AgentSpecError,
        from_callable,
        from_tool_loop,
        resolve_agent,
        stub_agent,
    )
    from evalkit.pit._bounds import (
        RunBounds,
    )
    from evalkit.pit._config import (
        RunConfig,
        load_config,
    )
    from evalkit.pit._export import (
        EXPORT_FORMATS,
        export_samples,
        session_samples,
    )
    from evalkit.pit._gateway import (
        Gateway,
        GatewayError,
    )
    from evalkit.pit._guard import (
        EgressAttempt,
        NetworkBlocked,
        NetworkBlockedError,
        NetworkGuard,
        network_guard,
    )
    from evalkit.pit._jail import (
        AgentLimits,
    )
    from evalkit.pit._model_agent import (
        from_model,
    )
    from evalkit.pit._prices import (
        Prices,
        PricesError,
        load_prices,
    )
    from evalkit.pit._probe import (
        choose_items,
        score_answer,
    )
    from evalkit.pit._runner import (
        RECEIPT_VERSION,
        RunResult,
        run,
    )
    from evalkit.pit._tool_specs import (
        TOOL_NAMES,
        tool_specs,
    )
    from evalkit.pit._toolbox import (
        CellView,
        Toolbox,
    )
    from evalkit.pit._trajfile import (
        TrajectoryFileError,
        line_bound,
        trajectory_chunks,
        trajectory_digest,
        trajectory_lines,
    )
    from evalkit.pit._verify import (
        Check,
        receipt_schema,
        verify_pit_receipt,
    )

_LAZY: dict[str, str] = {
    "Agent": "evalkit.pit._agents",
    "AgentLimits": "evalkit.pit._jail",
    "AgentReply": "evalkit.pit._agents",
    "AgentSpecError": "evalkit.pit._agents",
    "CellView": "evalkit.pit._toolbox",
    "Check": "evalkit.pit._verify",
    "EXPORT_FORMATS": "evalkit.pit._export",
    "EgressAttempt": "evalkit.pit._guard",
    "Gateway": "evalkit.pit._gateway",
    "GatewayError": "evalkit.pit._gateway",
    "NetworkBlocked": "evalkit.pit._guard",
    "NetworkBlockedError": "evalkit.pit._guard",
    "NetworkGuard": "evalkit.pit._guard",
    "Prices": "evalkit.pit._prices",
    "PricesError": "evalkit.pit._prices",
    "RECEIPT_VERSION": "evalkit.pit._runner",
    "RunBounds": "evalkit.pit._bounds",
    "RunConfig": "evalkit.pit._config",
    "RunResult": "evalkit.pit._runner",
    "TOOL_NAMES": "evalkit.pit._tool_specs",
    "Toolbox": "evalkit.pit._toolbox",
    "TrajectoryFileError": "evalkit.pit._trajfile",
    "choose_items": "evalkit.pit._probe",
    "export_samples": "evalkit.pit._export",
    "from_callable": "evalkit.pit._agents",
    "from_model": "evalkit.pit._model_agent",
    "from_tool_loop": "evalkit.pit._agents",
    "load_config": "evalkit.pit._config",
    "load_prices": "evalkit.pit._prices",
    "network_guard": "evalkit.pit._guard",
    "receipt_schema": "evalkit.pit._verify",
    "resolve_agent": "evalkit.pit._agents",
    "run": "evalkit.pit._runner",
    "score_answer": "evalkit.pit._probe",
    "session_samples": "evalkit.pit._export",
    "stub_agent": "evalkit.pit._agents",
    "tool_specs": "evalkit.pit._tool_specs",
    "line_bound": "evalkit.pit._trajfile",
    "trajectory_chunks": "evalkit.pit._trajfile",
    "trajectory_digest": "evalkit.pit._trajfile",
    "trajectory_lines": "evalkit.pit._trajfile",
    "verify_pit_receipt": "evalkit.pit._verify",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "EXPORT_FORMATS",
    "RECEIPT_VERSION",
    "TOOL_NAMES",
    "Agent",
    "AgentLimits",
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
    "RunBounds",
    "RunConfig",
    "RunResult",
    "Toolbox",
    "TrajectoryFileError",
    "choose_items",
    "export_samples",
    "from_callable",
    "from_model",
    "from_tool_loop",
    "line_bound",
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
    "trajectory_chunks",
    "trajectory_digest",
    "trajectory_lines",
    "verify_pit_receipt",
]
