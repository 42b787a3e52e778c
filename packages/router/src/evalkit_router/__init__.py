"""evalkit_router: campaigns, calibration and cost-aware routing (built by later issues)."""

__all__: list[str] = []
