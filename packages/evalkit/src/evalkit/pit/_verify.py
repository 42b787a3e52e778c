"""Offline re-check of a PIT receipt: the signature, the schema, every hash it binds, and a replay.

The replay recomputes the body from the trajectory, the release, the calendar (from pandas-market-calendars, never
a cache) and the prices, with the same code the runner used (:mod:`evalkit.pit._score`), re-serves every tool
call (:mod:`evalkit.pit._replay`), and reports each field where the receipt and the replay disagree as a
``MISMATCH`` line naming it. What it cannot check (a file not given, the agent's own code) is listed as
``not checked``, never passed over in silence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import attrs

from evalkit.pit._bindings import environment, harness_block
from evalkit.pit._config import load_config
from evalkit.pit._diff import ABSENT as _ABSENT
from evalkit.pit._diff import diff as _diff
from evalkit.pit._diff import show as _show
from evalkit.pit._trajfile import TrajectoryFileError, trajectory_digest
from evalkit.pit._verify_replay import Replay, replay_body
from evalkit_core import (
    ConfigError,
    ReceiptError,
    ReleaseError,
    canonical_bytes,
    check_receipt,
    check_release,
    check_signature,
    digest,
    file_digest,
    local_public_key,
    parse_trusted_key,
    read_receipt,
)

__all__ = ["Check", "Replay", "receipt_schema", "replay_body", "verify_pit_receipt"]

Status = Literal["ok", "MISMATCH", "not checked", "note"]
_MAX_DIFFS = 25

# Fields whose recomputation needs the price file: taken from the receipt (and listed) when it is not given.
_PRICE_FIELDS = (
    re.compile(r"^cells\[[^]]+\]\.(total_return|scored_trades|unpriced_trades)$"),
    re.compile(r"^contamination\."),
    re.compile(r"^prices(\.|$)"),
    re.compile(r"^protocol\.P4_costs_and_frictions\.price_source(\.|$)"),
)
# Reported by their own binding checks, not again by the body comparison.
_BOUND_ELSEWHERE = (
    re.compile(r"^binding(\.|$)"),
    re.compile(r"^trajectory\.sha256$"),
    re.compile(r"^prices\.sha256$"),
    re.compile(r"^protocol\.P4_costs_and_frictions\.price_source\.sha256$"),
)


def _status_of(check: Check) -> Status:
    return "ok" if check.ok else "MISMATCH"


@attrs.frozen
class Check:
    """One line of a verification. ``ok`` means nothing disagrees; ``status`` is ``ok``, ``MISMATCH``,
    ``not checked`` (could not be checked: ``detail`` says what to pass) or ``note`` (informational)."""

    name: str
    ok: bool
    detail: str = ""
    status: Status = attrs.field(default=attrs.Factory(_status_of, takes_self=True))


def _mismatch(name: str, detail: str) -> Check:
    return Check(name, ok=False, detail=detail)


def _not_checked(name: str, detail: str) -> Check:
    return Check(name, ok=True, detail=detail, status="not checked")


def receipt_schema() -> dict[str, Any]:
    """The published JSON Schema of the PIT receipt body (``evalkit/schemas/pit-receipt-body.schema.json``)."""
    from importlib import resources

    text = (
        resources.files("evalkit")
        .joinpath("schemas", "pit-receipt-body.schema.json")
        .read_text(encoding="utf-8")
    )
    return cast("dict[str, Any]", json.loads(text))


def _schema_check(body: Mapping[str, Any]) -> Check:
    import jsonschema

    validator = jsonschema.Draft202012Validator(receipt_schema())
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
    if not errors:
        return Check("schema", ok=True)
    shown = "; ".join(
        f"at /{'/'.join(str(p) for p in e.absolute_path)}: {e.message[:160]}" for e in errors[:3]
    )
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return _mismatch("schema", shown + more)


def _trusted(key: str | None, home: str | Path | None) -> tuple[set[str], str]:
    if key is not None:
        kid = parse_trusted_key(key)
        return {kid}, f"the key given with --key ({kid})"
    local = local_public_key(home)
    if local is None:
        return set(), "no key: there is no local key in $EVALKIT_HOME and no --key"
    return {local.key_id}, "the local key"


def verify_pit_receipt(
    receipt_path: str | Path,
    *,
    bundle: str | Path,
    trajectory: str | Path | None = None,
    config: str | Path | None = None,
    prices: str | Path | None = None,
    key: str | None = None,
    home: str | Path | None = None,
    workers: int | None = 1,
    executor: str = "local",
    address: str | None = None,
) -> list[Check]:
    """Check a PIT receipt offline; one :class:`Check` per line of the report, in order.

    ``trajectory`` defaults to the path the receipt records. ``config`` (a RunConfig file) is compared with the
    config the receipt records, which the replay uses either way. ``prices`` is needed to recompute returns.
    ``key`` (a PEM public key file or an ``ed25519:`` key id) is the signer to require; by default the local
    key in ``$EVALKIT_HOME`` (or ``home``) is the one trusted. ``workers``, ``executor`` and ``address``: where the
    replay walks the cells (see :func:`evalkit.pit._verify_pools.walker`; one local worker: in this process); the
    checks are the same whatever they are.
    """
    from evalkit.pit._verify_pools import walker

    on_workers = walker(bundle, workers, executor, address)  # a bad option is refused before any work
    checks: list[Check] = []
    try:
        receipt = read_receipt(receipt_path)
    except ReceiptError as exc:
        if not Path(receipt_path).is_file():
            raise
        # A damaged receipt binds nothing we can trust: every check fails against an empty binding.
        checks.append(_mismatch("signature", "the receipt cannot be read"))
        checks.append(_mismatch("body_sha256", str(exc)))
        receipt = None
    body: dict[str, Any] = cast("dict[str, Any]", receipt["body"]) if receipt is not None else {}
    binding = cast("dict[str, Any]", body.get("binding") if isinstance(body.get("binding"), dict) else {})
    if receipt is not None:
        trusted, trust_note = _trusted(key, home)
        sig = check_signature(receipt, trusted)
        checks.append(Check("signature", sig.ok, f"{sig.key_id}, {trust_note}" if sig.ok else sig.detail))
        checks.append(_schema_check(body))
        ok = check_receipt(receipt)
        checks.append(
            Check(
                "body_sha256",
                ok,
                "" if ok else f"body hashes to {digest(body)}, receipt says {receipt['body_sha256']}",
            )
        )

    traj = Path(trajectory) if trajectory is not None else Path(str(_get(body, "trajectory", "path") or ""))
    traj_found = traj.is_file()
    # the trajectory_sha256 line goes here, once the stream has been read (by the replay, when it runs)
    traj_at = len(checks)

    bundle_path = Path(bundle)
    try:
        problems = check_release(bundle_path)
    except ReleaseError as exc:  # e.g. release.json no longer parses: a mismatch, not a usage error
        if not bundle_path.is_dir():
            raise
        problems = [str(exc)]
    manifest_digest = _manifest_digest(bundle_path)
    want = binding.get("bundle_content_digest")
    if manifest_digest != want:
        problems.insert(0, f"{bundle_path} has content digest {manifest_digest}, receipt binds {want}")
    checks.append(Check("bundle_content_digest", not problems, "; ".join(problems)))
    if not problems:
        checks.append(_mask_secret_check(bundle_path, binding))

    checks.extend(_config_checks(body, binding, config))
    checks.extend(_prices_checks(binding, prices))
    checks.append(_calendar_check(body, binding))
    checks.extend(_environment_notes(body, binding))

    # The stream is read once: by the replay, which hashes it as it goes, or (when there is no replay) here.
    replayed: list[Check] | None = None
    got: str | None = None
    unreadable: str | None = None
    if receipt is not None and not problems and traj_found:
        result = replay_body(body, traj, bundle_path, Path(prices) if prices is not None else None, walker=on_workers)
        got, unreadable = result.digest, result.unreadable
        if unreadable is None:
            replayed = _replay_checks(body, result)
    if traj_found and got is None and unreadable is None:
        try:
            got = trajectory_digest(traj)  # of the canonical stream, decompressed when stored compressed
        except TrajectoryFileError as exc:
            unreadable = str(exc)
    want_traj = binding.get("trajectory_sha256")
    if not traj_found:
        traj_check = _mismatch("trajectory_sha256", f"{traj}: not found")
    elif unreadable is not None:
        traj_check = _mismatch("trajectory_sha256", unreadable)
    else:
        traj_check = Check(
            "trajectory_sha256", got == want_traj, "" if got == want_traj else f"{traj} has {got}, receipt binds {want_traj}"
        )
    checks.insert(traj_at, traj_check)

    if receipt is None:
        return checks
    if replayed is None:
        why = "the release does not match its digests" if problems else f"{traj} not found or not readable"
        checks.append(_not_checked("replay", why))
    else:
        checks.extend(replayed)
    agent = _get(body, "agent", "code")
    if isinstance(agent, dict) and cast("dict[str, Any]", agent).get("kind") == "module":
        code = cast("dict[str, Any]", agent)
        checks.append(
            _not_checked(
                "agent code",
                f"module {code.get('module')} {code.get('sha256')}: a replay re-serves the recorded calls, it does not run the agent",
            )
        )
    return checks


def _get(body: Mapping[str, Any], *path: str) -> Any:
    value: Any = body
    for p in path:
        if not isinstance(value, dict):
            return None
        value = cast("dict[str, Any]", value).get(p)
    return value


def _mask_secret_check(bundle: Path, binding: Mapping[str, Any]) -> Check:
    """The receipt binds the digest of the release's mask secret (None for a format-2 release): the same one."""
    from evalkit_core import MASKS_FILE, Masks

    path = bundle / MASKS_FILE
    try:
        got = Masks.from_json(json.loads(path.read_bytes()), str(path)).secret_sha256
    except (OSError, ValueError, ReleaseError) as exc:
        return _mismatch("mask_secret_sha256", f"{path}: {exc}")
    want = binding.get("mask_secret_sha256", _ABSENT)
    if got == want:
        return Check("mask_secret_sha256", ok=True, detail="none: the release's shift is the public map" if got is None else "")
    return _mismatch("mask_secret_sha256", f"{path} holds a secret hashing to {got}, receipt binds {_show(want)}")


def _config_checks(
    body: Mapping[str, Any], binding: Mapping[str, Any], config: str | Path | None
) -> list[Check]:
    want = binding.get("config_sha256")
    recorded = body.get("config")
    got = digest(cast("dict[str, Any]", recorded)) if isinstance(recorded, dict) else None
    out = [
        Check(
            "config_sha256",
            got == want,
            "the recorded config"
            if got == want
            else f"the recorded config digests to {got}, receipt binds {want}",
        )
    ]
    if config is not None:
        try:
            # a recorded config without mask_redacted ran with it off (or predates it: a config file without the
            # mask fields meant them off then), so the file is read that way too
            old = not (isinstance(recorded, dict) and "mask_redacted" in recorded)
            file_sha = load_config(config, recorded=old).digest()
        except ConfigError as exc:  # a config that no longer loads does not match what was run
            if not Path(config).is_file():
                raise
            return [*out, _mismatch("config_file", str(exc))]
        ok = file_sha == want
        out.append(
            Check("config_file", ok, "" if ok else f"{config} digests to {file_sha}, receipt binds {want}")
        )
    return out


def _prices_checks(binding: Mapping[str, Any], prices: str | Path | None) -> list[Check]:
    want = binding.get("prices_sha256")
    if prices is None:
        if want is None:
            return []
        return [_not_checked("prices", "pass --prices FILE; returns are not recomputed without it")]
    p = Path(prices)
    got = file_digest(p) if p.is_file() else None
    if want is None:
        return [_mismatch("prices_sha256", f"the receipt binds no prices, but {p} was given")]
    return [
        Check("prices_sha256", got == want, "" if got == want else f"{p} has {got}, receipt binds {want}")
    ]


def _calendar_check(body: Mapping[str, Any], binding: Mapping[str, Any]) -> Check:
    from evalkit_core import nyse

    got = nyse(use_cache=False).digest
    want = binding.get("calendar_sha256")
    if got == want:
        return Check("calendar_sha256", ok=True, detail="computed by pandas-market-calendars")
    lib = "pandas-market-calendars"
    then = _get(body, "environment", "libraries", lib)
    now = environment()["libraries"].get(lib)
    versions = "" if then == now else f"; the run had {lib} {then}, this check {now}"
    return _mismatch(
        "calendar_sha256", f"pandas-market-calendars gives {got}, receipt binds {want}{versions}"
    )


def _environment_notes(body: Mapping[str, Any], binding: Mapping[str, Any]) -> list[Check]:
    notes: list[Check] = []
    here = harness_block()["source_sha256"]
    then = binding.get("harness_source_sha256")
    if then == here:
        notes.append(
            Check("harness_source_sha256", ok=True, detail="the harness checking it is the one that ran")
        )
    else:
        notes.append(
            Check(
                "harness_source_sha256",
                ok=True,
                status="note",
                detail=f"the run's harness source is {then}, this evalkit's {here}: the replay runs this evalkit's code",
            )
        )
    env = body.get("environment")
    now = environment()
    if isinstance(env, dict) and not _same(cast("dict[str, Any]", env), now):
        recorded = cast("dict[str, Any]", env)
        diffs = (
            [f"python {recorded.get('python')} -> {now['python']}"]
            if recorded.get("python") != now["python"]
            else []
        )
        libs = cast("dict[str, Any]", recorded.get("libraries") or {})
        diffs += [f"{k} {libs.get(k)} -> {v}" for k, v in now["libraries"].items() if libs.get(k) != v]
        notes.append(Check("environment", ok=True, status="note", detail="; ".join(diffs) or "differs"))
    return notes


def _same(a: object, b: object) -> bool:
    return canonical_bytes(a) == canonical_bytes(b)


def _manifest_digest(root: Path) -> str | None:
    try:
        return json.loads((root / "release.json").read_text()).get("content_digest")
    except (OSError, ValueError, AttributeError):
        return None


def _replay_checks(body: Mapping[str, Any], result: Replay) -> list[Check]:
    checks = [_mismatch("trajectory", p) for p in result.problems]
    if result.body is None:
        return [*checks, _mismatch("replay", result.error or "cannot replay")]
    skip = list(_BOUND_ELSEWHERE) + ([] if result.priced else list(_PRICE_FIELDS))
    diffs = [d for d in _diff(body, result.body) if not any(p.search(d[0]) for p in skip)]
    for path, theirs, ours in diffs[:_MAX_DIFFS]:
        checks.append(_mismatch(path, f"receipt {theirs}, replay {ours}"))
    if len(diffs) > _MAX_DIFFS:
        checks.append(_mismatch("replay", f"{len(diffs) - _MAX_DIFFS} more fields disagree"))
    if not checks:
        c = result.counts
        what = (
            f"{result.cells} cells, {result.events} events, {c['tool_calls']} tool answers re-served, "
            f"{c['picks']} picks, {c['probe_items']} probe items"
        )
        if not result.priced and body.get("prices") is not None:
            what += "; returns not recomputed"
        checks.append(Check("replay", ok=True, detail=what))
    return checks
