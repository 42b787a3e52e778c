"""The campaign file (TOML): what to run, and the part of it that names the work (its identity).

```toml
name = "sim-seed"
models = ["sim/weak", "sim/mid", "sim/strong"]
k = 5
temperature = 0.0        # optional
max_tokens = 1024        # optional
budget_usd = "2.50"      # optional: the campaign's own cap (USD); absent = no campaign cap
concurrency = 16         # optional: model calls in flight at once
mine = false             # optional
registry = []            # optional: registry files merged on top (relative to this file)
cpu_seconds = 3.0        # optional: the sandbox's CPU limit per test (default: the verifier's)
timeouts = { attempt = 120 }  # optional: model-call deadlines in seconds (connect, attempt, call) over the
                              # registry entries' (a run setting; `campaign run --timeout` overrides it)

[tasks]
dir = "../tasks"         # relative to this file
glob = "code/*"          # optional: fnmatch over task ids
ids = []                 # optional: explicit task ids (combined with glob: both must hold)
```

The **identity** of a campaign is what decides its results: the name, the models (with their registry entries,
so a price change is seen), the selected tasks (id -> content digest), K, temperature, max_tokens, cpu_seconds and mine. The
budget cap, the concurrency and the timeouts are run settings: changing them between runs of one campaign is
allowed (that is how a campaign halted by its cap is resumed with a higher one).
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import cast

import attrs

from evalkit import JSON, Task, TaskError, bank_digest, load_tasks
from evalkit_core import digest, file_digest
from evalkit_core.models import Timeouts, parse_timeouts
from evalkit_router._errors import CampaignChangedError, CampaignError

__all__ = [
    "CampaignChangedError",
    "CampaignConfig",
    "CampaignError",
    "identity_diff",
    "load_campaign",
    "select_tasks",
]

_KEYS = {
    "name",
    "models",
    "k",
    "temperature",
    "max_tokens",
    "budget_usd",
    "concurrency",
    "mine",
    "registry",
    "tasks",
    "cpu_seconds",
    "timeouts",
}
_TASK_KEYS = {"dir", "glob", "ids"}


@attrs.frozen
class CampaignConfig:
    """A parsed campaign file. Paths are resolved against the file's directory."""

    name: str
    models: tuple[str, ...]
    tasks_dir: Path
    glob: str | None
    ids: tuple[str, ...]
    k: int
    temperature: float | None
    max_tokens: int
    budget_usd: Decimal | None
    concurrency: int
    mine: bool
    registry: tuple[Path, ...]
    cpu_seconds: float | None
    path: Path
    file_digest: str
    text: str
    timeouts: Timeouts = attrs.field(factory=Timeouts)

    def renamed(self, name: str) -> CampaignConfig:
        return attrs.evolve(self, name=name)

    def settings_json(self) -> dict[str, JSON]:
        """Everything the file says, paths as written resolved (for the store and the receipt)."""
        return {
            "name": self.name,
            "models": list(self.models),
            "tasks": {"dir": str(self.tasks_dir), "glob": self.glob, "ids": list(self.ids)},
            "k": self.k,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "budget_usd": None if self.budget_usd is None else str(self.budget_usd),
            "concurrency": self.concurrency,
            "mine": self.mine,
            "registry": [str(p) for p in self.registry],
            "cpu_seconds": self.cpu_seconds,
            "timeouts": cast("dict[str, JSON]", self.timeouts.to_json()),
        }


def _where(path: Path, key: str) -> str:
    return f"{path}: field '{key}'"


def _int(path: Path, data: Mapping[str, object], key: str, default: int | None, low: int) -> int:
    value = data.get(key, default)
    if value is None:
        raise CampaignError(f"{_where(path, key)} is required (an integer >= {low})")
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise CampaignError(f"{_where(path, key)}: expected an integer >= {low}, got {value!r}")
    return value


def _str_list(path: Path, value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in cast("list[object]", value)):
        raise CampaignError(f"{_where(path, key)}: expected a list of non-empty strings, got {value!r}")
    return tuple(cast("list[str]", value))


def _budget(path: Path, value: object) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise CampaignError(f'{_where(path, "budget_usd")}: expected an amount in USD such as "2.50"')
    try:
        amount = Decimal(str(value).strip().removeprefix("$"))
    except InvalidOperation:
        raise CampaignError(
            f'{_where(path, "budget_usd")}: expected an amount in USD such as "2.50", got {value!r}'
        ) from None
    if not amount.is_finite() or amount < 0:
        raise CampaignError(f"{_where(path, 'budget_usd')}: expected a non-negative amount, got {value!r}")
    return amount


def load_campaign(path: str | Path) -> CampaignConfig:
    """Read and check a campaign file. Raises :class:`CampaignError` naming the file and the field."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise CampaignError(f"{p}: campaign file not found") from None
    except OSError as exc:
        raise CampaignError(f"{p}: cannot read the campaign file ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CampaignError(f"{p}: not a valid TOML file ({exc})") from None
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise CampaignError(
            f"{p}: unknown field(s) {', '.join(unknown)}; expected {', '.join(sorted(_KEYS))}"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CampaignError(f"{_where(p, 'name')}: expected a non-empty string")
    models = _str_list(p, data.get("models"), "models")
    if not models or len(set(models)) != len(models):
        raise CampaignError(f"{_where(p, 'models')}: expected at least one model id, each once")
    tasks = data.get("tasks")
    if not isinstance(tasks, dict):
        raise CampaignError(f"{p}: table [tasks] is required (with dir, optional glob and ids)")
    tasks_t = cast("dict[str, object]", tasks)
    unknown = sorted(set(tasks_t) - _TASK_KEYS)
    if unknown:
        raise CampaignError(
            f"{p}: unknown field(s) in [tasks]: {', '.join(unknown)}; expected dir, glob, ids"
        )
    tdir = tasks_t.get("dir")
    if not isinstance(tdir, str) or not tdir:
        raise CampaignError(f"{_where(p, 'tasks.dir')}: expected the task bank directory")
    glob = tasks_t.get("glob")
    if glob is not None and (not isinstance(glob, str) or not glob):
        raise CampaignError(f'{_where(p, "tasks.glob")}: expected a pattern such as "code/*"')
    ids = _str_list(p, tasks_t.get("ids", []), "tasks.ids")
    temperature = data.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2
    ):
        raise CampaignError(f"{_where(p, 'temperature')}: expected a number in [0, 2], got {temperature!r}")
    mine = data.get("mine", False)
    if not isinstance(mine, bool):
        raise CampaignError(f"{_where(p, 'mine')}: expected true or false, got {mine!r}")
    cpu = data.get("cpu_seconds")
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, int | float) or not 0 < cpu <= 60):
        raise CampaignError(
            f"{_where(p, 'cpu_seconds')}: expected a number of seconds in (0, 60], got {cpu!r}"
        )
    timeouts = Timeouts()
    if "timeouts" in data:
        timeouts = parse_timeouts(data["timeouts"], _where(p, "timeouts"), CampaignError)
    base = p.resolve().parent
    registry = tuple(base / r for r in _str_list(p, data.get("registry", []), "registry"))
    return CampaignConfig(
        name=name.strip(),
        models=models,
        tasks_dir=(base / tdir).resolve(),
        glob=glob,
        ids=ids,
        k=_int(p, data, "k", None, 1),
        temperature=None if temperature is None else float(temperature),
        max_tokens=_int(p, data, "max_tokens", 1024, 1),
        budget_usd=_budget(p, data.get("budget_usd")),
        concurrency=_int(p, data, "concurrency", 8, 1),
        mine=mine,
        registry=registry,
        cpu_seconds=None if cpu is None else float(cpu),
        path=p.resolve(),
        file_digest=file_digest(p),
        text=text,
        timeouts=timeouts,
    )


def select_tasks(config: CampaignConfig) -> list[Task]:
    """The tasks the campaign names, sorted by id. Unknown ids and an empty selection are errors."""
    try:
        tasks = load_tasks(config.tasks_dir)
    except TaskError as exc:
        raise CampaignError(f"{config.path}: field 'tasks.dir': {exc}") from None
    known = {t.id for t in tasks}
    missing = [i for i in config.ids if i not in known]
    if missing:
        raise CampaignError(
            f"{config.path}: field 'tasks.ids': not in {config.tasks_dir}: {', '.join(missing)}"
        )
    chosen = [
        t
        for t in tasks
        if (config.glob is None or fnmatch.fnmatchcase(t.id, config.glob))
        and (not config.ids or t.id in config.ids)
    ]
    if not chosen:
        raise CampaignError(
            f"{config.path}: field 'tasks': the selection matches no task in {config.tasks_dir}"
        )
    return chosen


def identity(
    config: CampaignConfig, tasks: Sequence[Task], model_entries: Mapping[str, JSON]
) -> dict[str, JSON]:
    """What names the work of a campaign (see the module docstring). ``model_entries``: each model's registry
    table (prices included)."""
    return {
        "name": config.name,
        "models": {m: model_entries[m] for m in config.models},
        "tasks": {t.id: t.digest for t in tasks},
        "tasks_digest": bank_digest(tasks),
        "k": config.k,
        "temperature": config.temperature,
        "max_tokens": config.max_tokens,
        "mine": config.mine,
        "cpu_seconds": config.cpu_seconds,
    }


def identity_digest(ident: Mapping[str, JSON]) -> str:
    return digest(dict(ident))


def identity_diff(old: Mapping[str, JSON], new: Mapping[str, JSON]) -> list[str]:
    """What changed between two identities, one line each (``field: old -> new``)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if key == "tasks_digest" or digest({"v": a}) == digest({"v": b}):
            continue
        if key in ("tasks", "models") and isinstance(a, dict) and isinstance(b, dict):
            added = sorted(set(b) - set(a))
            removed = sorted(set(a) - set(b))
            changed = sorted(k for k in set(a) & set(b) if digest({"v": a[k]}) != digest({"v": b[k]}))
            parts: list[str] = []
            if added:
                parts.append(f"added {', '.join(added)}")
            if removed:
                parts.append(f"removed {', '.join(removed)}")
            if changed:
                what = "content changed" if key == "tasks" else "registry entry changed"
                parts.append(f"{what}: {', '.join(changed)}")
            order_a, order_b = list(a), list(b)
            if not parts and order_a != order_b:
                parts.append(f"order {order_a} -> {order_b}")
            out.append(f"{key}: {'; '.join(parts)}")
            continue
        out.append(f"{key}: {a!r} -> {b!r}")
    return out
