"""The seed task bank and the seed campaign that ship inside evalkit-harness (``evalkit/seed/``).

There is one copy: the package's ``seed/tasks`` and ``seed/campaigns`` are the repository's ``tasks/`` and
``campaigns/`` (those two are symbolic links to them), so the checkout and an installed wheel grade the same bank,
byte for byte. ``evalkit tasks demo --out DIR`` and ``evalkit campaign demo --out DIR`` write copies where a user
wants them; nothing here writes into the installed package.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from evalkit_core import ConfigError

__all__ = ["SEED_CAMPAIGN", "seed_bank", "seed_campaign", "write_seed_bank", "write_seed_campaign"]

SEED_CAMPAIGN = "sim-seed.toml"
_SEED = Path(__file__).resolve().parent.parent / "seed"


def seed_bank() -> Path:
    """The seed task bank as installed (read it; do not write into it)."""
    return _SEED / "tasks"


def seed_campaign() -> Path:
    """The seed campaign file as installed; its ``[tasks] dir`` is ``../tasks`` (the seed bank beside it)."""
    return _SEED / "campaigns" / SEED_CAMPAIGN


def _ignore(_directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or n.endswith(".pyc")]


def _fresh(out: Path, label: str, *, force: bool) -> None:
    if out.is_symlink():  # replacing it would replace what it points to (in a checkout: the seed itself)
        raise ConfigError(f"{label}: a symbolic link (choose a directory of its own)")
    if out.resolve().is_relative_to(_SEED) or _SEED.is_relative_to(out.resolve()):
        raise ConfigError(f"{label}: that is where evalkit's own seed lives (choose another directory)")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{label}: a file is in the way (expected a directory to write into)")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"{label}: already holds files (choose an empty directory, or --force to replace it)")


def _copy_tree(source: Path, out: Path) -> None:
    """Copy ``source`` to ``out`` whole or not at all: into a sibling temporary directory, then renamed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copytree(source, staging / "x", ignore=_ignore)
        if out.is_dir():
            shutil.rmtree(out)
        (staging / "x").replace(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_seed_bank(out: str | Path, *, force: bool = False) -> Path:
    """Write the seed bank (its 70 tasks and README) into ``out``; refuse a directory holding files unless
    ``force``. Returns ``out``."""
    target = Path(out)
    _fresh(target, f"--out {target}", force=force)
    _copy_tree(seed_bank(), target)
    return target


def _holds_the_seed(bank: Path) -> bool:
    """Does ``bank`` hold the seed bank's tasks (same digest)? Then a campaign written beside it can use it."""
    from evalkit.grading._tasks import TaskError, bank_digest, load_tasks

    try:
        return bank_digest(load_tasks(bank)) == bank_digest(load_tasks(seed_bank()))
    except TaskError:
        return False


def write_seed_campaign(out: str | Path, *, force: bool = False) -> tuple[Path, Path, bool]:
    """Write ``out/campaigns/sim-seed.toml`` and the bank it names, ``out/tasks``, laid out as in the repository
    (the same bytes), so ``evalkit campaign run out/campaigns/sim-seed.toml`` runs. A ``out/tasks`` that already
    holds the seed bank (``evalkit tasks demo --out out/tasks``) is kept. Returns (campaign, bank, bank written)."""
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--out {root}: a file is in the way (expected a directory to write into)")
    campaigns, tasks = root / "campaigns", root / "tasks"
    keep = not force and not tasks.is_symlink() and tasks.is_dir() and any(tasks.iterdir()) and _holds_the_seed(tasks)
    for path in (campaigns,) if keep else (campaigns, tasks):
        _fresh(path, f"--out {root}: {path}", force=force)
    if not keep:
        _copy_tree(seed_bank(), tasks)
    _copy_tree(seed_campaign().parent, campaigns)
    return campaigns / SEED_CAMPAIGN, tasks, not keep
