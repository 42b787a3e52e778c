"""What a PIT receipt binds besides its input files: the harness's own source, the agent's code and the
Python environment. No path and no wall-clock value enters these blocks, so a receipt body stays byte-identical
across runs and working directories on one machine.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import sys
from pathlib import Path
from typing import Any

from evalkit_core import digest, file_digest

__all__ = ["HARNESS_DISTRIBUTION", "LIBRARIES", "agent_code", "environment", "harness_block", "harness_source_files"]

# The distribution that ships the ``evalkit`` and ``pit_harness`` import names (``evalkit`` on the package index
# is an unrelated project).
HARNESS_DISTRIBUTION = "evalkit-harness"

# The libraries whose versions decide what a run computes: frames, Parquet, the calendar, signatures, JSON.
LIBRARIES = (
    HARNESS_DISTRIBUTION,
    "evalkit-core",
    "polars",
    "pyarrow",
    "pandas",
    "pandas-market-calendars",
    "cryptography",
    "rfc8785",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def harness_source_files() -> dict[str, Path]:
    """The files the harness source digest covers, by name relative to their package's parent directory:
    ``evalkit/pit/*.py``, the ``pit_harness`` facade, ``evalkit_core``'s top-level modules and models layer,
    and the published receipt schema."""
    import evalkit_core

    evalkit_dir = Path(__file__).parent.parent  # the evalkit package (imported, it would pull in every room)
    core_dir = Path(evalkit_core.__file__).parent
    facade_dir = (
        evalkit_dir.parent / "pit_harness"
    )  # shipped in the same wheel; a layer above, so not imported
    groups = (
        (evalkit_dir, sorted((evalkit_dir / "pit").glob("*.py"))),
        (evalkit_dir, sorted((evalkit_dir / "schemas").glob("pit-*.json"))),
        (facade_dir, sorted(facade_dir.rglob("*.py"))),
        (core_dir, sorted(core_dir.glob("*.py"))),
        (core_dir, sorted((core_dir / "models").glob("*.py"))),
    )
    return {f"{top.name}/{p.relative_to(top).as_posix()}": p for top, files in groups for p in files}


@functools.cache
def harness_block() -> dict[str, Any]:
    """``{name, version, source_sha256, source_files}``: the digest is over ``{name: sha256}`` of every file of
    :func:`harness_source_files`, so any edit of the harness's code changes it."""
    from evalkit.pit._score import HARNESS_NAME

    files = harness_source_files()
    return {
        "name": HARNESS_NAME,
        "version": _version(HARNESS_DISTRIBUTION) or "0+unknown",
        "source_sha256": digest({name: file_digest(path) for name, path in sorted(files.items())}),
        "source_files": len(files),
    }


@functools.cache
def environment() -> dict[str, Any]:
    """The Python and the versions of :data:`LIBRARIES` (null for one not installed)."""
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "libraries": {name: _version(name) for name in LIBRARIES},
    }


def agent_code(spec: str, name: str) -> dict[str, Any]:
    """What the agent's code was, as far as the harness can tell without running it.

    - ``stub``: built in, covered by the harness source digest;
    - ``model:ID``: the adapter is harness code; the model is named (its reported version is in P1);
    - ``inspect:MODULE:SOLVER@MODEL`` (what :func:`from_inspect_solver` names its agents): the solver's module as
      below, the model id, and the installed Inspect AI version;
    - a ``module:function`` spec, or an agent named ``plain:module:qualname`` / ``tool_loop:module:qualname``
      (what :func:`from_callable` and :func:`from_tool_loop` name them): the sha256 of the module's source
      file, and the installed distribution's name and version when the module belongs to one. A module
      without a source file (code typed into ``exec``, say) is recorded with ``sha256: null``.
    """
    if spec == "stub" and name == "stub":
        return {"kind": "builtin", "covered_by": "harness.source_sha256"}
    if spec.startswith("model:") and name.startswith("model:"):
        return {"kind": "model", "model_id": spec.removeprefix("model:")}
    inspect_spec = spec if spec.startswith("inspect:") else name if name.startswith("inspect:") else None
    if inspect_spec is not None:  # inspect:MODULE:SOLVER@MODEL: the solver's module, the model, Inspect's version
        body, _, model = inspect_spec.removeprefix("inspect:").rpartition("@")
        out = _module_code(body.partition(":")[0])
        out["model_id"] = model
        out["framework"] = {"name": "inspect-ai", "version": _version("inspect-ai") or "unknown"}
        return out
    module = _module_of(spec, name)
    if module is None:
        return {"kind": "unknown", "detail": f"cannot tell the agent's module from {name!r}"}
    return _module_code(module)


def _module_code(module: str) -> dict[str, Any]:
    source = _module_file(module)
    out: dict[str, Any] = {
        "kind": "module",
        "module": module,
        "sha256": file_digest(source) if source is not None else None,
        "distribution": _distribution(module),
    }
    if source is None:
        out["detail"] = "no source file for this module"
    return out


def _module_of(spec: str, name: str) -> str | None:
    if spec != "stub" and not spec.startswith("model:") and ":" in spec:
        return spec.partition(":")[0]
    kind, _, rest = name.partition(":")
    if kind in {"plain", "tool_loop"} and ":" in rest:
        return rest.partition(":")[0]
    return None


def _module_file(module: str) -> Path | None:
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if origin is None:  # found without importing it (or its packages): the agent runs only inside its jail
        from evalkit.pit._agents import find_module

        try:
            spec = find_module(module)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None and spec.has_location else None
    if origin is None:
        return None
    path = Path(origin)
    return path if path.is_file() and path.suffix == ".py" else None


def _distribution(module: str) -> dict[str, str] | None:
    top = module.partition(".")[0]
    dists = importlib.metadata.packages_distributions().get(top) or []
    if not dists:
        return None
    dist = min(dists)
    version = _version(dist)
    return {"name": dist, "version": version} if version else None
