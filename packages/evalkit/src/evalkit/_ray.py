"""Ray for the products that use it (grading and campaigns, verify's replay): joining or starting a cluster.

Ray is optional (the extra ``evalkit-harness[ray]``); nothing here imports it before a Ray executor is asked
for, and asking for one without it installed is a :class:`~evalkit_core.ConfigError` (one line, exit 2) naming
what to install. Started here (no ``--address``) a cluster is a single-machine instance bound to the loopback
interface, without the dashboard, with usage statistics off, a small object store, and the CPUs it is given;
joined (``--address HOST:PORT``) it is the operator's cluster as configured.
"""

from __future__ import annotations

import os
from types import ModuleType, TracebackType
from typing import Any, Self, cast

from evalkit_core import ConfigError

__all__ = [
    "EXECUTORS",
    "OBJECT_STORE_BYTES",
    "RAY_INSTALL_HINT",
    "RayCluster",
    "check_executor",
    "import_ray",
]

EXECUTORS = ("local", "ray")
RAY_INSTALL_HINT = (
    "install the extra: uv pip install 'evalkit-harness[ray]' (or pip install 'evalkit-harness[ray]')"
)
OBJECT_STORE_BYTES = 150 * 1024 * 1024  # rollouts and verdicts are small; Ray's default is 30% of memory

# Set before Ray starts in this process (and inherited by what it starts): no usage report to the Ray project,
# and no `uv run` wrapping of worker processes (Ray's uv hook would start each worker in another environment).
_RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
# A single-machine instance started here: every Ray process listens on 127.0.0.1 (Ray's own switch for a
# machine that is not part of a cluster), and a loaded machine gets time to start the node's agents.
_LOCAL_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_agent_register_timeout_ms": "120000",
    "RAY_raylet_start_wait_time_s": "120",
}


def check_executor(executor: str, address: str | None, option: str = "--executor") -> None:
    """Refuse an unknown executor, an ``--address`` without ``--executor ray``, and ``ray`` without Ray."""
    if executor not in EXECUTORS:
        raise ConfigError(f"{option}: expected one of {', '.join(EXECUTORS)}, got {executor!r}")
    if address is not None and executor != "ray":
        raise ConfigError("--address: only with --executor ray (it names the Ray cluster to join)")
    if address is not None and not address.strip():
        raise ConfigError(
            "--address: expected HOST:PORT of a Ray cluster's head (or 'auto'), got an empty value"
        )
    if executor == "ray":
        import_ray(f"{option} ray")


def import_ray(option: str = "--executor ray") -> ModuleType:
    """The ``ray`` module, or a :class:`ConfigError` saying what to install."""
    for name, value in _RAY_ENV.items():
        os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{option}: Ray is not installed; {RAY_INSTALL_HINT}") from None
    return ray


class RayCluster:
    """Join the Ray cluster at ``address``, or start a single-machine one with ``num_cpus`` CPUs (default: the
    machine's). Use as a context manager: a cluster started here is shut down on exit; one that was already
    initialised in this process (a test's, a notebook's) is used as it is and left running."""

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.started = False
        self._ray: ModuleType | None = None

    def __enter__(self) -> Self:
        import logging  # here, not at import: evalkit eval imports this module, and Ray brings logging anyway

        ray = import_ray()
        self._ray = ray
        if ray.is_initialized():
            return self
        common: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.ERROR,  # Ray's start-up chatter stays off the command's stderr
            "namespace": "evalkit",
        }
        if self.address is None:
            for name, value in _LOCAL_ENV.items():
                os.environ.setdefault(name, value)
            ray.init(
                address="local",  # never join a cluster found on the machine: start our own
                num_cpus=self.num_cpus or os.cpu_count() or 1,
                object_store_memory=OBJECT_STORE_BYTES,
                _node_ip_address="127.0.0.1",
                **common,
            )
        else:
            try:
                ray.init(address=self.address, **common)
            except ConnectionError as exc:
                raise ConfigError(f"--address {self.address}: no Ray cluster answers there ({exc})") from None
        self.started = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.started and self._ray is not None:
            self._ray.shutdown()
            self.started = False

    def nodes(self) -> list[str]:
        """The ids of the cluster's live nodes."""
        assert self._ray is not None
        return [str(n["NodeID"]) for n in cast("list[dict[str, Any]]", self._ray.nodes()) if n.get("Alive")]

    def cpus(self) -> int:
        assert self._ray is not None
        return max(1, int(cast("dict[str, float]", self._ray.cluster_resources()).get("CPU", 1)))
