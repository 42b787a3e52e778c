"""evalkit_training: verifier rewards and fine-tuning exports (built by later issues)."""

__all__: list[str] = []
