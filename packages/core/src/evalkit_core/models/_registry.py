"""The model registry: the shipped ``registry.toml`` with user files merged on top.

Merge rule: user files are applied in order; a model table in a user file adds a model or overrides single
fields of an existing one (nested tables such as ``prices`` merge key by key). The registry's digest is the
digest of the merged content; every call records it, and the store keeps the content under that digest, so a
cost can be recomputed later from what was recorded.

Keys follow hosts. A layer that changes the ``base_url`` of a model an earlier layer defined must name
``api_key_env`` in the same table: otherwise a campaign file or ``$EVALKIT_REGISTRY`` could send the real
provider key to another host without saying so. :func:`key_routes` lists which key goes to which host, and
runs print it.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any, Literal, cast

import attrs

from evalkit_core._canonical import digest
from evalkit_core._errors import ConfigError, EvalkitError
from evalkit_core.models._errors import RegistryError

__all__ = [
    "DEFAULT_TIMEOUTS",
    "PROVIDERS",
    "REGISTRY_ENV",
    "ModelEntry",
    "Prices",
    "Registry",
    "SimSpec",
    "Timeouts",
    "key_routes",
    "load_registry",
    "parse_timeouts",
    "shipped_registry_text",
]

REGISTRY_ENV = "EVALKIT_REGISTRY"
Provider = Literal["anthropic", "openai", "openai-compatible", "sim"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai", "openai-compatible", "sim")
_SHIPPED = "<shipped registry.toml>"
_PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")


@attrs.frozen
class Prices:
    """USD per million tokens, exact."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    @property
    def max_input(self) -> Decimal:
        """The dearest way an input token can be billed (plain, cache read or cache write)."""
        return max(self.input, self.cache_read, self.cache_write)


_TIMEOUT_FIELDS = ("connect", "attempt", "call")


@attrs.frozen
class Timeouts:
    """Deadlines in seconds: ``connect`` (opening a connection, TLS included), ``attempt`` (one request from
    connect to the last byte of the reply, however slowly it trickles) and ``call`` (every attempt, backoff
    wait and rate-limit wait of one call together). A field left None takes its value from the layer below:
    the CLI flag over the campaign file over the model's registry entry over :data:`DEFAULT_TIMEOUTS`."""

    connect: float | None = None
    attempt: float | None = None
    call: float | None = None

    def over(self, base: Timeouts) -> Timeouts:
        """These values where set, ``base``'s elsewhere."""
        return Timeouts(
            connect=base.connect if self.connect is None else self.connect,
            attempt=base.attempt if self.attempt is None else self.attempt,
            call=base.call if self.call is None else self.call,
        )

    def to_json(self) -> dict[str, float | None]:
        return {"connect": self.connect, "attempt": self.attempt, "call": self.call}


DEFAULT_TIMEOUTS = Timeouts(connect=10.0, attempt=600.0, call=1800.0)


def parse_timeouts(value: Any, where: str, error: type[EvalkitError] = ConfigError) -> Timeouts:
    """A table (``{connect = 5, attempt = 60, call = 300}``, any subset), or text ``connect=5,attempt=60``,
    or a bare number (the attempt deadline). Raises ``error`` naming ``where``."""
    expected = "a table or text such as connect=5,attempt=60,call=300 (seconds, each > 0)"
    table: dict[str, Any]
    if isinstance(value, str):
        text = value.strip()
        table = {}
        try:
            if "=" not in text:
                table["attempt"] = float(text)
            else:
                for part in text.split(","):
                    name, _, number = part.partition("=")
                    table[name.strip()] = float(number)
        except ValueError:
            raise error(f"{where}: {value!r}; expected {expected}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        table = {"attempt": value}
    elif isinstance(value, dict):
        table = cast("dict[str, Any]", value)
    else:
        raise error(f"{where}: {value!r}; expected {expected}")
    unknown = sorted(set(table) - set(_TIMEOUT_FIELDS))
    if unknown:
        raise error(f"{where}: unknown deadline(s) {', '.join(unknown)}; expected connect, attempt, call")
    out: dict[str, float] = {}
    for name, v in table.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1e7:
            raise error(f"{where}: {name} = {v!r}; expected a number of seconds > 0")
        out[name] = float(v)
    return Timeouts(**out)


@attrs.frozen
class SimSpec:
    success_rate: float
    latency_ms: int = 0


@attrs.frozen
class ModelEntry:
    id: str
    provider: Provider
    api_model: str
    base_url: str
    api_key_env: str | None  # None: the endpoint needs no key
    prices: Prices
    context_window: int
    max_output: int
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    reserve_overhead_tokens: int = 0
    sim: SimSpec | None = None
    timeouts: Timeouts = DEFAULT_TIMEOUTS
    as_of: str | None = None  # the date (YYYY-MM-DD) prices and context window were read from ``source``
    source: str | None = None  # where they were read (the provider's price page, its model page)
    # The model's training cutoff and who states it (a model card, the provider's documentation): both or
    # neither. Holdouts (``evalkit holdout plan``) and the PIT receipt's P2 slot read them.
    training_cutoff: dt.date | None = None
    training_cutoff_source: str | None = None

    @property
    def simulated(self) -> bool:
        return self.provider == "sim"


@attrs.frozen
class Registry:
    models: Mapping[str, ModelEntry]
    digest: str
    content: Mapping[str, Any]  # the merged TOML content (JSON-shaped); its digest is ``digest``
    sources: tuple[str, ...]
    prices_as_of: str | None

    def get(self, model_id: str) -> ModelEntry:
        try:
            return self.models[model_id]
        except KeyError:
            known = ", ".join(sorted(self.models))
            raise RegistryError(
                f"unknown model {model_id!r}; the registry ({', '.join(self.sources)}) has: {known}"
            ) from None


def shipped_registry_text() -> str:
    return resources.files("evalkit_core.models").joinpath("registry.toml").read_text(encoding="utf-8")


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{source}: not valid TOML ({exc})") from None


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge(cast("dict[str, Any]", old), cast("dict[str, Any]", value))
        else:
            out[key] = value
    return out


def _field(
    table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, expected: str
) -> Any:
    if key not in table:
        raise RegistryError(f"{where}: field {key!r} is missing; expected {expected}")
    value = table[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RegistryError(f"{where}: field {key!r} = {value!r}; expected {expected}")
    return value


def _decimal(text: Any, where: str, key: str) -> Decimal:
    if not isinstance(text, str):
        raise RegistryError(f'{where}: field {key!r} = {text!r}; expected a decimal string such as "3.00"')
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise RegistryError(
            f'{where}: field {key!r} = {text!r}; expected a decimal string such as "3.00"'
        ) from None
    if not value.is_finite() or value < 0:
        raise RegistryError(f"{where}: field {key!r} = {text!r}; expected a finite, non-negative decimal")
    return value


def _entry(model_id: str, table: Any, where: str) -> ModelEntry:
    if not isinstance(table, dict):
        raise RegistryError(f"{where}: expected a table")
    t = cast("dict[str, Any]", table)
    provider = _field(t, "provider", str, where, f"one of {', '.join(PROVIDERS)}")
    if provider not in PROVIDERS:
        raise RegistryError(
            f"{where}: field 'provider' = {provider!r}; expected one of {', '.join(PROVIDERS)}"
        )
    base_url = _field(t, "base_url", str, where, "an http(s) URL (empty for sim models)")
    if provider != "sim" and not base_url.startswith(("http://", "https://")):
        raise RegistryError(f"{where}: field 'base_url' = {base_url!r}; expected an http:// or https:// URL")
    key_env = _field(t, "api_key_env", str, where, 'an environment variable name, or "" for none')
    prices_t = _field(t, "prices", dict, where, "a table with input, output, cache_read, cache_write")
    for k in _PRICE_FIELDS:
        if k not in prices_t:
            raise RegistryError(
                f"{where}.prices: field {k!r} is missing; expected a decimal string (USD per 1M tokens)"
            )
    prices = Prices(*(_decimal(prices_t[k], f"{where}.prices", k) for k in _PRICE_FIELDS))
    limits = cast("dict[str, Any]", t.get("limits", {}))
    rpm = limits.get("requests_per_minute")
    tpm = limits.get("tokens_per_minute")
    for name, v in (("requests_per_minute", rpm), ("tokens_per_minute", tpm)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
            raise RegistryError(f"{where}.limits: field {name!r} = {v!r}; expected a positive number")
    sim: SimSpec | None = None
    if provider == "sim":
        sim_t = _field(t, "sim", dict, where, "a table with success_rate (decimal string in [0, 1])")
        rate = _decimal(sim_t.get("success_rate"), f"{where}.sim", "success_rate")
        if rate > 1:
            raise RegistryError(f"{where}.sim: field 'success_rate' = {rate}; expected a value in [0, 1]")
        latency = sim_t.get("latency_ms", 0)
        if isinstance(latency, bool) or not isinstance(latency, int) or latency < 0:
            raise RegistryError(
                f"{where}.sim: field 'latency_ms' = {latency!r}; expected a non-negative integer"
            )
        sim = SimSpec(float(rate), latency)
    overhead = t.get("reserve_overhead_tokens", 0)
    if isinstance(overhead, bool) or not isinstance(overhead, int) or overhead < 0:
        raise RegistryError(
            f"{where}: field 'reserve_overhead_tokens' = {overhead!r}; expected a non-negative integer"
        )
    timeouts = DEFAULT_TIMEOUTS
    if "timeouts" in t:
        timeouts = parse_timeouts(t["timeouts"], f"{where}: field 'timeouts'", RegistryError).over(
            DEFAULT_TIMEOUTS
        )
    as_of = t.get("as_of")
    if as_of is not None:
        if not isinstance(as_of, str) or not re.fullmatch(r"\d{4}-\d\d-\d\d", as_of):
            raise RegistryError(f"{where}: field 'as_of' = {as_of!r}; expected a date string YYYY-MM-DD")
        try:
            dt.date.fromisoformat(as_of)
        except ValueError:
            raise RegistryError(f"{where}: field 'as_of' = {as_of!r}; expected a real date YYYY-MM-DD") from None
    source = t.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise RegistryError(f"{where}: field 'source' = {source!r}; expected a non-empty string")
    context = _field(t, "context_window", int, where, "a positive integer (tokens)")
    max_out = _field(t, "max_output", int, where, "a positive integer (tokens)")
    if context <= 0 or max_out <= 0:
        raise RegistryError(f"{where}: context_window and max_output must be positive integers")
    return ModelEntry(
        id=model_id,
        provider=provider,
        api_model=_field(t, "api_model", str, where, "the provider's model name (a string)"),
        base_url=base_url.rstrip("/"),
        api_key_env=key_env or None,
        prices=prices,
        context_window=context,
        max_output=max_out,
        requests_per_minute=None if rpm is None else float(rpm),
        tokens_per_minute=None if tpm is None else float(tpm),
        reserve_overhead_tokens=overhead,
        sim=sim,
        timeouts=timeouts,
        as_of=as_of,
        source=source,
        **_cutoff(t, where),
    )


def _cutoff(t: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``training_cutoff`` (a quoted YYYY-MM-DD) and ``training_cutoff_source`` (required with it)."""
    raw = t.get("training_cutoff")
    source = t.get("training_cutoff_source")
    if raw is None:
        if source is not None:
            raise RegistryError(f"{where}: field 'training_cutoff_source' given without 'training_cutoff'")
        return {}
    # A quoted string, not a TOML date: the registry's content is hashed as JSON.
    try:
        day = dt.date.fromisoformat(raw) if isinstance(raw, str) else None
    except ValueError:
        day = None
    if day is None:
        raise RegistryError(f"{where}: field 'training_cutoff' = {raw!r}; expected a quoted date such as \"2024-06-30\"")
    if not isinstance(source, str) or not source.strip():
        raise RegistryError(
            f"{where}: field 'training_cutoff_source' is missing; expected who states the cutoff "
            "(a model card, the provider's documentation)"
        )
    return {"training_cutoff": day, "training_cutoff_source": source.strip()}


def _check_hosts(below: Mapping[str, Any], models: Mapping[str, Any], source: str) -> None:
    """A layer that moves a model defined below it to another host must say which key goes there."""
    known = cast("Mapping[str, Any]", below.get("models", {}))
    for model_id, table in models.items():
        old = known.get(model_id)
        if not isinstance(old, dict) or not isinstance(table, dict):
            continue
        new_t = cast("dict[str, Any]", table)
        old_url = cast("dict[str, Any]", old).get("base_url")
        if "base_url" in new_t and new_t["base_url"] != old_url and "api_key_env" not in new_t:
            raise RegistryError(
                f'{source}: [models."{model_id}"] moves base_url from {old_url!r} to {new_t["base_url"]!r} '
                "without naming api_key_env; a layer that sends a model to another host must say in the same "
                'table which key goes there (api_key_env = "NAME", or "" for none)'
            )


def key_routes(registry: Registry, model_ids: Sequence[str]) -> list[str]:
    """One line per key a run will send: ``KEY_ENV -> scheme://host (model, model)``, sorted; models without
    a key (local servers, sims) are left out."""
    from urllib.parse import urlsplit

    routes: dict[tuple[str, str], list[str]] = {}
    for model_id in model_ids:
        entry = registry.get(model_id)
        if entry.api_key_env is None or entry.simulated:
            continue
        parts = urlsplit(entry.base_url)
        host = f"{parts.scheme}://{parts.netloc}"
        routes.setdefault((entry.api_key_env, host), []).append(model_id)
    return [f"{env} -> {host} ({', '.join(sorted(ids))})" for (env, host), ids in sorted(routes.items())]


def load_registry(
    paths: Sequence[str | Path] = (), *, env: Mapping[str, str] | None = None, shipped: bool = True
) -> Registry:
    """The shipped registry, then the files in ``$EVALKIT_REGISTRY`` (os.pathsep-separated), then
    ``paths``."""
    environ = os.environ if env is None else env
    layers: list[tuple[str, dict[str, Any]]] = []
    if shipped:
        layers.append((_SHIPPED, _parse_toml(shipped_registry_text(), _SHIPPED)))
    user = [p for p in environ.get(REGISTRY_ENV, "").split(os.pathsep) if p]
    for p in [*user, *paths]:
        path = Path(p)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            how = f"${REGISTRY_ENV}" if str(p) in user else "--registry"
            raise RegistryError(f"{path}: registry file not found (named by {how})") from None
        except OSError as exc:
            raise RegistryError(f"{path}: cannot read registry file ({exc.strerror})") from None
        layers.append((str(path), _parse_toml(text, str(path))))
    merged: dict[str, Any] = {}
    for source, data in layers:
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise RegistryError(f"{source}: [models] must be a table of model tables")
        for key in data:
            if key not in ("models", "registry"):
                raise RegistryError(
                    f'{source}: unknown top-level table {key!r}; expected [registry] or [models."id"]'
                )
        _check_hosts(merged, cast("dict[str, Any]", models), source)
        merged = _merge(merged, data)
    models_t = cast("dict[str, Any]", merged.get("models", {}))
    entries: dict[str, ModelEntry] = {}
    for model_id in sorted(models_t):
        source = next((s for s, d in reversed(layers) if model_id in d.get("models", {})), _SHIPPED)
        entries[model_id] = _entry(model_id, models_t[model_id], f'{source}: [models."{model_id}"]')
    meta = cast("dict[str, Any]", merged.get("registry", {}))
    as_of = meta.get("prices_as_of")
    try:
        reg_digest = digest(merged)
    except ValueError as exc:  # e.g. a TOML date or time value, which is not JSON
        raise RegistryError(
            f"registry ({', '.join(s for s, _ in layers)}): {exc}; write dates as strings"
        ) from None
    return Registry(
        models=entries,
        digest=reg_digest,
        content=merged,
        sources=tuple(s for s, _ in layers),
        prices_as_of=str(as_of) if as_of is not None else None,
    )
