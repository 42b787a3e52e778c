"""Scoring rollout records (reward + hacking checks) and writing them in the formats fine-tuning libraries read.

Every export is JSON Lines with one object per line, the same keys on every line and one type per key (nulls
aside), no top-level arrays: what ``datasets.load_dataset("json", data_files=...)`` (pyarrow's JSON reader
underneath) loads into one consistent table.

The campaign's rollouts are read straight from the store's ``campaigns``/``rollouts`` tables
(:func:`campaign_rollouts`): evalkit_training may not import evalkit_router, and these tables are the contract.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, cast, get_args

import attrs

from evalkit import (
    JSON,
    CallTest,
    Sandbox,
    SandboxLimits,
    Task,
    VerifierSettings,
    render_prompt,
)
from evalkit import (
    bank_digest as task_bank_digest,
)
from evalkit_core import atomic_write_bytes
from evalkit_core.store import Store
from evalkit_training._hacking import HackingReport, check_rollout
from evalkit_training._reward import (
    AdversarialSource,
    Grading,
    Reward,
    RewardError,
    adversarial_set_digest,
    compute_reward,
    grade_rollouts,
    grading_from_json,
    no_adversarial,
    provenance,
    strongest_isolation,
    weaker_isolation,
)

__all__ = [
    "FORMATS",
    "CampaignRollouts",
    "ExportFormat",
    "ExportSummary",
    "RolloutRecord",
    "ScoredRollout",
    "campaign_rollouts",
    "export_rows",
    "score_rollouts",
    "write_export",
]

ExportFormat = Literal["jsonl", "grpo", "dpo", "sft"]
FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)


@attrs.frozen
class RolloutRecord:
    """One rollout as a campaign recorded it. ``grading`` is the stored verdict (``None``: not graded yet, it is
    graded at export); ``prompt`` defaults to the task's rendered prompt; ``task_digest`` is the digest the
    campaign saw (checked against the bank)."""

    rollout_key: str
    task_id: str
    model: str
    sample: int
    completion: str
    grading: Grading | None = None
    prompt: str | None = None
    campaign: str = ""
    task_digest: str | None = None
    # what the stored verdict was graded under (a campaign records them; ``None``: not recorded)
    settings_digest: str | None = None
    bank_digest: str | None = None
    isolation: str | None = None


@attrs.frozen
class ScoredRollout:
    record: RolloutRecord
    prompt: str
    grading: Grading
    reward: Reward
    hacking: HackingReport
    provenance: Mapping[str, JSON]
    # the sandbox isolation the verdict was graded under (``None``: not known)
    isolation: str | None = None
    # graded under weaker isolation than required: no reward (``reward.value`` is None)
    weaker_isolation: bool = False
    # graded at export rather than read from the store
    graded_now: bool = False

    @property
    def passing(self) -> bool:
        """Passes every test and its reward stands (a flagged rollout passes only when flagged rewards are allowed)."""
        return (
            self.reward.components.passes_all and self.reward.value is not None and self.reward.value >= 1.0
        )

    @property
    def failing(self) -> bool:
        """Has a reward and is not passing (infra errors are neither)."""
        return self.reward.value is not None and not self.passing


def _check_stored(
    r: RolloutRecord, g: Grading, settings: VerifierSettings, bank_digest: str | None, adv: Sequence[CallTest]
) -> None:
    """Refuse a stored verdict that was graded under other verifier settings, another task bank or another
    adversarial set than the export would grade it under now (``--regrade`` grades it again instead)."""
    where = f"rollout {r.rollout_key} ({r.task_id}, {r.model}, sample {r.sample})"
    fix = "export with --regrade to grade every rollout again under the current ones"
    if g.settings_digest != settings.digest:
        raise RewardError(
            f"{where}: field 'settings_digest': graded under verifier settings {g.settings_digest}, the export's "
            f"are {settings.digest}; {fix}"
        )
    if r.settings_digest is not None and r.settings_digest != g.settings_digest:
        raise RewardError(
            f"{where}: field 'settings_digest': the store says {r.settings_digest}, its verdict says "
            f"{g.settings_digest}; {fix}"
        )
    if bank_digest is not None:
        if r.bank_digest is None:
            raise RewardError(
                f"{where}: field 'bank_digest': graded before evalkit recorded the bank, settings and isolation "
                f"of a verdict; {fix} (or run the campaign again: it regrades without model calls)"
            )
        if r.bank_digest != bank_digest:
            raise RewardError(
                f"{where}: field 'bank_digest': graded against task bank {r.bank_digest}, the export's bank is "
                f"{bank_digest}; {fix}"
            )
    want = adversarial_set_digest(adv)
    if (g.adversarial_set is not None and g.adversarial_set != want) or len(g.adversarial) != len(adv):
        raise RewardError(
            f"{where}: field 'adversarial_set': graded on {len(g.adversarial)} adversarial tests, the bank now "
            f"holds {len(adv)} for {r.task_id} ({want}); {fix} (or run the campaign again)"
        )


def _out_of(progress: Callable[[int, int], None], total: int) -> Callable[[int, int], None]:
    def report(done: int, _n: int) -> None:
        progress(done, total)

    return report


def score_rollouts(
    records: Sequence[RolloutRecord],
    tasks: Sequence[Task],
    *,
    settings: VerifierSettings | None = None,
    sandbox: Sandbox | None = None,
    adversarial: AdversarialSource = no_adversarial,
    allow_flagged: bool = False,
    workers: int | None = None,
    regrade: bool = False,
    bank_digest: str | None = None,
    required_isolation: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[ScoredRollout]:
    """Reward and hacking checks for each record, in order.

    A record's stored grading is used as it is, after a digest check: graded under other verifier settings
    than ``settings``, against another task bank than ``bank_digest`` (when given) or on another adversarial
    set, it is refused (:class:`RewardError`). Records without a grading, and every record with ``regrade``,
    are graded now in the sandbox. A rollout graded under weaker isolation than ``required_isolation`` (see
    :func:`weaker_isolation`) gets no reward (``None``) and is marked ``weaker_isolation``. Raises
    :class:`RewardError` for unknown tasks and task digests that changed.
    ``progress(done, total)`` counts the rollouts graded now and then every rollout checked.
    """
    by_id = {t.id: t for t in tasks}
    if settings is None:
        settings = VerifierSettings(sandbox.limits) if sandbox is not None else VerifierSettings()
    adv_of: dict[str, tuple[CallTest, ...]] = {}
    for r in records:
        task = by_id.get(r.task_id)
        if task is None:
            raise RewardError(
                f"rollout {r.rollout_key}: field 'task_id': {r.task_id!r} is not in the task bank"
            )
        if r.task_digest is not None and r.task_digest != task.digest:
            raise RewardError(
                f"rollout {r.rollout_key}: field 'task_digest': the campaign graded {r.task_id} at "
                f"{r.task_digest}, the bank now holds {task.digest} (the task changed since the campaign)"
            )
        if r.task_id not in adv_of:
            adv_of[r.task_id] = tuple(adversarial(task))
    gradings: list[Grading | None] = []
    isolations: list[str | None] = []
    todo: list[int] = []
    for i, r in enumerate(records):
        g = r.grading
        if g is not None and not regrade and g.infra_error is None:
            _check_stored(r, g, settings, bank_digest, adv_of[r.task_id])
        if g is None or regrade:
            gradings.append(None)
            isolations.append(None)
            todo.append(i)
        else:
            gradings.append(g)
            isolations.append(r.isolation)
    if todo:
        items = [(by_id[records[i].task_id], records[i].completion, adv_of[records[i].task_id]) for i in todo]
        total = len(todo) + len(records)
        graded = None if progress is None else _out_of(progress, total)
        if sandbox is not None:
            fresh = grade_rollouts(items, sandbox, settings, progress=graded)
            label = sandbox.isolation.label
        else:
            with Sandbox(settings.limits, workers=workers) as box:
                fresh = grade_rollouts(items, box, settings, progress=graded)
                label = box.isolation.label
        for i, g in zip(todo, fresh, strict=True):
            gradings[i] = g
            isolations[i] = label
    fresh_set = set(todo)
    out: list[ScoredRollout] = []
    for i, (r, g, iso) in enumerate(zip(records, gradings, isolations, strict=True)):
        assert g is not None
        task = by_id[r.task_id]
        adv = adv_of[r.task_id]
        report = check_rollout(task, r.completion, g, adv)
        reward = compute_reward(g, flagged=report.flagged, allow_flagged=allow_flagged)
        weaker = weaker_isolation(iso, required_isolation)
        if weaker:
            reward = attrs.evolve(reward, value=None)
        if progress is not None and (i % 64 == 63 or i == len(records) - 1):
            progress(len(todo) + i + 1, len(todo) + len(records))
        out.append(
            ScoredRollout(
                record=r,
                prompt=r.prompt if r.prompt is not None else render_prompt(task),
                grading=g,
                reward=reward,
                hacking=report,
                provenance=provenance(task, settings, adv),
                isolation=iso,
                weaker_isolation=weaker,
                graded_now=i in fresh_set,
            )
        )
    return out


# --------------------------------------------------------------------------------------------- rows


def _jsonl_row(s: ScoredRollout) -> dict[str, JSON]:
    r = s.record
    return {
        "rollout_key": r.rollout_key,
        "campaign": r.campaign,
        "task_id": r.task_id,
        "model": r.model,
        "sample": r.sample,
        "prompt": s.prompt,
        "completion": r.completion,
        "reward": s.reward.value,
        "flagged": s.hacking.flagged,
        "components": s.reward.components.to_json(),
        "flags": s.hacking.flags(),
        "flag_details": s.hacking.details(),
        "isolation": s.isolation,
        "weaker_isolation": s.weaker_isolation,
        "provenance": dict(s.provenance),
    }


def _by_task(scored: Sequence[ScoredRollout]) -> dict[str, list[ScoredRollout]]:
    groups: dict[str, list[ScoredRollout]] = {}
    for s in sorted(
        scored, key=lambda s: (s.record.task_id, s.record.model, s.record.sample, s.record.rollout_key)
    ):
        groups.setdefault(s.record.task_id, []).append(s)
    return groups


def _grpo_rows(scored: Sequence[ScoredRollout], tasks_dir: str) -> list[dict[str, JSON]]:
    isolation = strongest_isolation([s.isolation for s in scored])
    rows: list[dict[str, JSON]] = []
    for task_id, group in _by_task(scored).items():
        first = group[0]
        rows.append(
            {
                "prompt": first.prompt,
                "task_id": task_id,
                "task_digest": str(first.provenance["task_digest"]),
                "tasks_dir": tasks_dir,
                # the reward function refuses to score under weaker isolation than the campaign's (None: no check)
                "isolation": isolation,
                "provenance": dict(first.provenance),
            }
        )
    return rows


def _dpo_rows(scored: Sequence[ScoredRollout]) -> list[dict[str, JSON]]:
    rows: list[dict[str, JSON]] = []
    for task_id, group in _by_task(scored).items():
        chosen = [s for s in group if s.passing]
        rejected = [s for s in group if s.failing]
        if not chosen:
            continue
        for i, bad in enumerate(rejected):  # every failing completion once, against the passing ones in turn
            good = chosen[i % len(chosen)]
            rows.append(
                {
                    "prompt": good.prompt,
                    "chosen": good.record.completion,
                    "rejected": bad.record.completion,
                    "task_id": task_id,
                    "chosen_reward": good.reward.value,
                    "rejected_reward": bad.reward.value,
                    "chosen_rollout_key": good.record.rollout_key,
                    "rejected_rollout_key": bad.record.rollout_key,
                    "chosen_model": good.record.model,
                    "rejected_model": bad.record.model,
                    "rejected_flagged": bad.hacking.flagged,
                    "provenance": dict(good.provenance),
                }
            )
    return rows


def _sft_rows(scored: Sequence[ScoredRollout]) -> list[dict[str, JSON]]:
    rows: list[dict[str, JSON]] = []
    for task_id, group in _by_task(scored).items():
        for s in group:
            if not (s.reward.components.passes_all and not s.hacking.flagged and s.reward.value is not None):
                continue
            rows.append(
                {
                    "messages": [
                        {"role": "user", "content": s.prompt},
                        {"role": "assistant", "content": s.record.completion},
                    ],
                    "task_id": task_id,
                    "rollout_key": s.record.rollout_key,
                    "model": s.record.model,
                    "reward": s.reward.value,
                    "provenance": dict(s.provenance),
                }
            )
    return rows


def export_rows(fmt: str, scored: Sequence[ScoredRollout], *, tasks_dir: str = "") -> list[dict[str, JSON]]:
    """The rows of one export format. Raises :class:`RewardError` for an unknown format."""
    if fmt == "jsonl":
        return [_jsonl_row(s) for s in scored]
    if fmt == "grpo":
        return _grpo_rows(scored, tasks_dir)
    if fmt == "dpo":
        return _dpo_rows(scored)
    if fmt == "sft":
        return _sft_rows(scored)
    raise RewardError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")


@attrs.frozen
class ExportSummary:
    format: str
    path: Path
    rows: int
    rollouts: int
    rewarded: int
    infra_errors: int
    passing: int
    flagged: int
    flags: Mapping[str, int]
    weaker_isolation: int = 0
    graded_now: int = 0

    def to_json(self) -> dict[str, JSON]:
        return {
            "format": self.format,
            "path": str(self.path),
            "rows": self.rows,
            "rollouts": self.rollouts,
            "rewarded": self.rewarded,
            "infra_errors": self.infra_errors,
            "passing": self.passing,
            "flagged": self.flagged,
            "flags": dict(self.flags),
            "weaker_isolation": self.weaker_isolation,
            "graded_now": self.graded_now,
        }


def write_export(
    fmt: str, scored: Sequence[ScoredRollout], out: str | Path, *, tasks_dir: str = ""
) -> ExportSummary:
    """Write one export as JSON Lines (atomically: the old file or the whole new one)."""
    rows = export_rows(fmt, scored, tasks_dir=tasks_dir)
    text = "".join(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n" for row in rows)
    path = Path(out)
    atomic_write_bytes(path, text.encode("utf-8"))
    counts: dict[str, int] = {}
    for s in scored:
        for check in s.hacking.tripped:
            counts[check] = counts.get(check, 0) + 1
    return ExportSummary(
        format=fmt,
        path=path,
        rows=len(rows),
        rollouts=len(scored),
        rewarded=sum(s.reward.value is not None for s in scored),
        infra_errors=sum(s.grading.infra_error is not None for s in scored),
        passing=sum(s.passing for s in scored),
        flagged=sum(s.hacking.flagged for s in scored),
        flags=counts,
        weaker_isolation=sum(s.weaker_isolation for s in scored),
        graded_now=sum(s.graded_now for s in scored),
    )


# --------------------------------------------------------------------------------------------- the store


@attrs.frozen
class CampaignRollouts:
    """A campaign's rollouts as stored, and the task bank its configuration names."""

    campaign_id: str
    name: str
    tasks_dir: Path | None
    records: tuple[RolloutRecord, ...]
    # the campaign's sandbox limits (its ``cpu_seconds``), so the export's verifier settings are the campaign's
    limits: SandboxLimits = attrs.field(factory=SandboxLimits)
    # the ids of the tasks the campaign selected (empty: those of its rollouts)
    task_ids: tuple[str, ...] = ()

    @property
    def settings(self) -> VerifierSettings:
        """The verifier settings the campaign grades under (with this evalkit's verifier version)."""
        return VerifierSettings(self.limits)

    @property
    def isolation(self) -> str | None:
        """The campaign's recorded isolation: every layer any of its stored verdicts was graded behind."""
        return strongest_isolation([r.isolation for r in self.records if r.grading is not None])

    def bank_digest(self, tasks: Sequence[Task]) -> str:
        """The digest of the campaign's selection of ``tasks`` (as the campaign computes it)."""
        ids = set(self.task_ids or {r.task_id for r in self.records})
        chosen = [t for t in tasks if t.id in ids]
        missing = sorted(ids - {t.id for t in chosen})
        if missing:
            raise RewardError(
                f"campaign {self.name}: the task bank has no {', '.join(missing[:5])}"
                + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
            )
        return task_bank_digest(chosen)


def _loads(where: str, text: str) -> JSON:
    try:
        return cast("JSON", json.loads(text))
    except ValueError as exc:
        raise RewardError(f"{where}: not valid JSON ({exc})") from None


def campaign_rollouts(store: Store, campaign: str) -> CampaignRollouts:
    """Read a campaign's rollouts (by campaign id or name) from the store's ``campaigns`` and ``rollouts``
    tables. Graded rollouts carry their stored verdict; completed but ungraded ones are graded at export."""
    with store.snapshot() as db:
        row = db.execute(
            "SELECT campaign_id, name, config FROM campaigns WHERE campaign_id = ? OR name = ? "
            "ORDER BY campaign_id = ? DESC LIMIT 1",
            (campaign, campaign, campaign),
        ).fetchone()
        if row is None:
            known = [str(r[0]) for r in db.execute("SELECT campaign_id FROM campaigns ORDER BY campaign_id")]
            hint = f"; the store has {', '.join(known)}" if known else "; the store has no campaigns"
            raise RewardError(f"{store.path}: campaign {campaign!r} not found{hint}")
        campaign_id, name, config_text = str(row[0]), str(row[1] or row[0]), str(row[2])
        rows = db.execute(
            "SELECT rollout_key, task_id, task_digest, model_id, sample, status, completion, result, infra_error,"
            " settings_digest, bank_digest, isolation"
            " FROM rollouts WHERE campaign_id = ? ORDER BY task_id, model_id, sample",
            (campaign_id,),
        ).fetchall()
    config = _loads(f"{store.path}: campaign {campaign_id} field 'config'", config_text)
    tasks_dir: Path | None = None
    limits = SandboxLimits()
    task_ids: tuple[str, ...] = ()
    if isinstance(config, dict):
        settings = config.get("settings")
        tasks = settings.get("tasks") if isinstance(settings, dict) else None
        tdir = tasks.get("dir") if isinstance(tasks, dict) else None
        tasks_dir = Path(tdir) if isinstance(tdir, str) and tdir else None
        ident = config.get("identity")
        if isinstance(ident, dict):
            cpu = ident.get("cpu_seconds")
            if isinstance(cpu, int | float) and not isinstance(cpu, bool):
                limits = SandboxLimits(cpu_seconds=float(cpu))  # as the campaign builds its sandbox
            chosen = ident.get("tasks")
            if isinstance(chosen, dict):
                task_ids = tuple(chosen)
    records: list[RolloutRecord] = []
    for key, task_id, task_digest, model_id, sample, status, completion, result, infra, sd, bd, iso in rows:
        where = f"{store.path}: rollout {key}"
        comp = _loads(f"{where} field 'completion'", str(completion))
        text = comp.get("text") if isinstance(comp, dict) else comp
        if not isinstance(text, str):
            raise RewardError(f"{where}: field 'completion' has no completion text")
        grading: Grading | None = None
        if status == "graded" and result is not None:
            data = _loads(f"{where} field 'result'", str(result))
            if not isinstance(data, dict):
                raise RewardError(f"{where}: field 'result': expected a verdict object")
            grading = grading_from_json(data, f"{where} field 'result'", task_id=str(task_id))
            if infra is not None and grading.infra_error is None:
                grading = attrs.evolve(grading, infra_error=str(infra))
        records.append(
            RolloutRecord(
                rollout_key=str(key),
                task_id=str(task_id),
                model=str(model_id),
                sample=int(sample),
                completion=text,
                grading=grading,
                campaign=name,
                task_digest=str(task_digest),
                settings_digest=None if sd is None else str(sd),
                bank_digest=None if bd is None else str(bd),
                isolation=None if iso is None else str(iso),
            )
        )
    return CampaignRollouts(
        campaign_id=campaign_id,
        name=name,
        tasks_dir=tasks_dir,
        records=tuple(records),
        limits=limits,
        task_ids=task_ids,
    )
