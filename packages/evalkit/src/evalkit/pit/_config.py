"""The run configuration: what a PIT run is, loadable from and dumpable to JSON.

A config loaded from a file remembers the file (:attr:`RunConfig.origin`, not part of its JSON or digest), so
every error found later, against the release or the machine, names the file and the field. Relative input
paths in a config file (``bundle_path``, ``prices_path``) resolve against the file's directory, not the
working directory; output paths (``trajectory_path``, ``receipt_path``) stay relative to where the run starts,
as the ``--trajectory``/``--receipt`` options are.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit_core import ARMS, CLOCKS, ConfigError, digest, read_json_object

__all__ = ["NETWORK_POLICIES", "OUTPUT_FIELDS", "RECEIPT_NETWORK_POLICY", "RunConfig", "load_config"]

NETWORK_POLICIES = ("abort", "continue")
# The receipt's vocabulary for the policy (the published shape); a config may use either name, and is recorded
# (and digested) under the config's own name, so `fail_closed` and `abort` are one config.
RECEIPT_NETWORK_POLICY = {"abort": "fail_closed", "continue": "record_and_continue"}
_POLICY_ALIASES = {receipt: config for config, receipt in RECEIPT_NETWORK_POLICY.items()}
# Locations are not part of the config digest: outputs can go anywhere, and inputs are bound by content
# (the release's content digest, the price file's sha256), so moving them does not change what was run.
OUTPUT_FIELDS = frozenset({"trajectory_path", "receipt_path"})
INPUT_FIELDS = frozenset({"bundle_path", "prices_path"})
LOCATION_FIELDS = INPUT_FIELDS | OUTPUT_FIELDS
_STRING_FIELDS = ("bundle_path", "agent", "network_policy", "trajectory_path", "receipt_path")
_OPTIONAL_STRING_FIELDS = (
    "start", "end", "model_version", "training_cutoff", "training_cutoff_source", "prices_path", "price_source", "prices_pulled_at",
)


def _tuple_of_str(v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        return tuple(s.strip() for s in v.split(",") if s.strip())
    return tuple(str(x) for x in v)


def _opt_str(v: Any) -> str | None:
    if v is None or v == "":
        return None
    return str(v)


def _str(v: Any) -> str:
    return str(v)


def _policy(v: Any) -> str:
    text = str(v)
    return _POLICY_ALIASES.get(text, text)


@attrs.frozen
class RunConfig:
    """One PIT run: arms x clocks over a window of a release. Field names are part of the public contract."""

    bundle_path: str = attrs.field(converter=_str)
    forms: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    start: str | None = attrs.field(default=None, converter=_opt_str)
    end: str | None = attrs.field(default=None, converter=_opt_str)
    arms: tuple[str, ...] = attrs.field(default=ARMS, converter=_tuple_of_str)
    clocks: tuple[str, ...] = attrs.field(default=tuple(str(c) for c in CLOCKS), converter=_tuple_of_str)
    hold_sessions: int = 5
    agent: str = "stub"
    probe_items: int = 10
    network_policy: str = attrs.field(default="abort", converter=_policy)
    model_version: str | None = attrs.field(default=None, converter=_opt_str)
    training_cutoff: str | None = attrs.field(default=None, converter=_opt_str)
    # Who states the cutoff (a model card, the registry's entry); left out of the digest when not given, so a
    # config that does not use it keeps the digest it had before the field existed.
    training_cutoff_source: str | None = attrs.field(default=None, converter=_opt_str)
    prices_path: str | None = attrs.field(default=None, converter=_opt_str)
    price_source: str | None = attrs.field(default=None, converter=_opt_str)
    prices_pulled_at: str | None = attrs.field(default=None, converter=_opt_str)
    # Serve the shifted arm with decoys, drawn times of day and a hidden window (docs/pit-harness.md, "Decoys"),
    # and (mask_redacted) the redacted arm with clones and drawn instants: both on by default. Left out of the JSON
    # and the digest when off, so a config that does not use them keeps the digest it had; a recorded config
    # (a receipt's) that lacks them predates them, and is read with them off (RunConfig.from_recorded).
    mask_decoys: bool = True
    mask_redacted: bool = True
    trajectory_path: str = attrs.field(default="trajectory.jsonl", converter=_str)
    receipt_path: str = attrs.field(default="receipt.json", converter=_str)
    # The file this config was loaded from, for error messages only: not part of to_json() or the digest.
    origin: str | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field that can be checked without the release; ConfigError names the field."""
        for arm in self.arms:
            if arm not in ARMS:
                raise ConfigError(f"arms: unknown arm {arm!r}; expected some of {', '.join(ARMS)}")
        for clock in self.clocks:
            if clock not in {str(c) for c in CLOCKS}:
                raise ConfigError(f"clocks: unknown clock {clock!r}; expected some of leaky, dump, pit")
        if not self.arms:
            raise ConfigError("arms: expected at least one arm")
        if not self.clocks:
            raise ConfigError("clocks: expected at least one clock")
        if len(set(self.arms)) != len(self.arms) or len(set(self.clocks)) != len(self.clocks):
            raise ConfigError("arms/clocks: each may be listed once")
        if not isinstance(self.hold_sessions, int) or isinstance(self.hold_sessions, bool) or self.hold_sessions < 1:  # pyright: ignore[reportUnnecessaryComparison]
            raise ConfigError(f"hold_sessions: expected a positive integer, got {self.hold_sessions!r}")
        if not isinstance(self.probe_items, int) or isinstance(self.probe_items, bool) or self.probe_items < 0:  # pyright: ignore[reportUnnecessaryComparison]
            raise ConfigError(f"probe_items: expected a non-negative integer, got {self.probe_items!r}")
        if not isinstance(self.agent, str) or not self.agent.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(f"agent: expected 'stub' or 'module:function', got {self.agent!r}")
        if self.network_policy not in NETWORK_POLICIES:
            raise ConfigError(
                f"network_policy: expected abort (or fail_closed) or continue (or record_and_continue), "
                f"got {self.network_policy!r}"
            )
        for field in ("start", "end", "training_cutoff", "prices_pulled_at"):
            value = getattr(self, field)
            if value is not None:
                try:
                    dt.date.fromisoformat(value)
                except ValueError:
                    raise ConfigError(f"{field}: expected a date YYYY-MM-DD, got {value!r}") from None
        if self.training_cutoff_source is not None and self.training_cutoff is None:
            raise ConfigError("training_cutoff_source: given without training_cutoff")
        for field in ("mask_decoys", "mask_redacted"):
            if type(getattr(self, field)) is not bool:
                raise ConfigError(f"{field}: expected true or false, got {getattr(self, field)!r}")
        if self.prices_path is not None and not self.price_source:
            raise ConfigError("price_source: required when prices_path is given (say where the prices came from)")

    def error(self, field: str, message: str) -> ConfigError:
        """A ConfigError naming the config file (when there is one) and ``field``."""
        where = f"{self.origin}: field {field!r}" if self.origin else f"config field {field!r}"
        return ConfigError(f"{where}: {message}")

    def check_outputs(self) -> None:
        """Refuse output paths that cannot be written, before anything is written: a parent that is a file,
        a target that is a directory, or the trajectory and the receipt at one path."""
        targets = {field: Path(getattr(self, field)) for field in sorted(OUTPUT_FIELDS)}
        for field, target in targets.items():
            if target.is_dir():
                raise self.error(field, f"{target} is a directory; expected a file path")
            for parent in target.parents:
                if parent.exists():
                    if not parent.is_dir():
                        raise self.error(field, f"{target}: parent {parent} is a file; expected a directory")
                    break
        if targets["trajectory_path"].resolve() == targets["receipt_path"].resolve():
            raise self.error("receipt_path", f"{targets['receipt_path']} is also the trajectory_path; expected two files")

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d.pop("origin")
        if not self.mask_decoys:
            d.pop("mask_decoys")
        if not (self.mask_decoys and self.mask_redacted):  # without decoys nothing is served: nor the redacted arm
            d.pop("mask_redacted")
        d["forms"], d["arms"], d["clocks"] = list(self.forms), list(self.arms), list(self.clocks)
        return d

    def digest_view(self) -> dict[str, Any]:
        """The fields the config digest covers (everything but locations)."""
        view = {k: v for k, v in self.to_json().items() if k not in LOCATION_FIELDS}
        if view["training_cutoff_source"] is None:
            del view["training_cutoff_source"]
        return view

    def digest(self) -> str:
        return digest(self.digest_view())

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "config") -> RunConfig:
        known = {f.name for f in attrs.fields(cls)} - {"origin"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
        if "bundle_path" not in data:
            raise ConfigError(f"{source}: field 'bundle_path' is required")
        for field in ("hold_sessions", "probe_items"):
            if field in data and (not isinstance(data[field], int) or isinstance(data[field], bool)):
                raise ConfigError(f"{source}: field {field!r} expected an integer, got {data[field]!r}")
        for field in ("forms", "arms", "clocks"):
            value = data.get(field)
            if field in data and not (
                isinstance(value, str) or (isinstance(value, list) and all(isinstance(x, str) for x in cast("list[Any]", value)))
            ):
                raise ConfigError(f"{source}: field {field!r} expected a list of strings, got {value!r}")
        for field in _STRING_FIELDS:
            if field in data and not isinstance(data[field], str):
                raise ConfigError(f"{source}: field {field!r} expected a string, got {data[field]!r}")
        for field in _OPTIONAL_STRING_FIELDS:
            if data.get(field) is not None and not isinstance(data[field], str):
                raise ConfigError(f"{source}: field {field!r} expected a string or null, got {data[field]!r}")
        try:
            return cls(**data, origin=source)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any], *, source: str = "the receipt's config") -> RunConfig:
        """A config as a receipt records it: a mask field it lacks was off (receipt versions 2 and 3 predate the
        defaults; :meth:`to_json` leaves a field that is off out)."""
        fields = dict(data)
        fields.setdefault("mask_decoys", False)
        fields.setdefault("mask_redacted", False)
        return cls.from_json(fields, source=source)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")


def load_config(path: str | Path, *, recorded: bool = False) -> RunConfig:
    """The RunConfig a JSON file holds (its relative inputs read from the file's directory); ``recorded``: read as
    :meth:`RunConfig.from_recorded` (a mask field the file lacks is off)."""
    p = Path(path)
    fields = read_json_object(p, missing="config file not found", expected="a JSON object of RunConfig fields")
    for field in sorted(INPUT_FIELDS):
        value = fields.get(field)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            # A config file's inputs are where the file says, wherever the run is started from.
            fields[field] = str(p.parent / value)
    return (RunConfig.from_recorded if recorded else RunConfig.from_json)(fields, source=str(p))
