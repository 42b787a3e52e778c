"""pit_harness: the public face of evalkit's point-in-time harness.

    from pit_harness import Bundle, RunConfig, load_prices, run
    from pit_harness.adapters.plain import from_callable
"""

from evalkit.pit import AgentReply, Prices, RunConfig, RunResult, Toolbox, load_prices, run
from evalkit_core import Release as Bundle

__all__ = ["AgentReply", "Bundle", "Prices", "RunConfig", "RunResult", "Toolbox", "load_prices", "run"]
