"""evalkit: the point-in-time harness and the verifier stack."""
