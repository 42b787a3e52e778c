"""``evalkit bundle build``: build a release from EDGAR metadata the user downloaded (see docs/edgar.md)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from evalkit_core import ConfigError

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from evalkit_core.edgar import EdgarBuild

__all__ = ["build", "build_summary"]


def _date(value: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{option}: expected a date YYYY-MM-DD, got {value!r}") from None


class _Reporter:
    """Turns the builder's (stage, done, total) callbacks into rich progress bars, one per stage."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        task = self._tasks.get(stage)
        if task is None:
            task = self._progress.add_task(stage, total=total)
            self._tasks[stage] = task
        self._progress.update(task, completed=done, total=total)


def build_summary(result: EdgarBuild) -> dict[str, Any]:
    """What ``bundle build --json`` prints."""
    prov = result.provenance
    return {
        "path": str(result.path),
        "name": result.name,
        "window": dict(prov["window"]),
        "rows": result.rows,
        "forms": dict(result.by_form),
        "acceptance_coverage": {
            "rows_with_acceptance_at": result.with_acceptance_at,
            "share": prov["acceptance"]["coverage"],
        },
        "flags_by_reason": dict(result.flags_by_reason),
        "rows_with_disseminated_at": result.with_disseminated_at,
        "pit_entries_moved_by_dissemination": result.pit_entries_moved,
        "content_digest": result.content_digest,
    }


def build(
    submissions: Path | None = typer.Option(
        None,
        "--submissions",
        help="Directory of CIK##########.json files (and page files), or submissions.zip.",
    ),
    index: Path | None = typer.Option(
        None,
        "--index",
        help="Directory (searched recursively) or file of EDGAR daily/full-index .idx[.gz] files.",
    ),
    tickers: Path | None = typer.Option(None, "--tickers", help="The SEC's company_tickers.json (optional)."),
    start: str = typer.Option(..., "--start", help="First filing date of the window (YYYY-MM-DD)."),
    end: str = typer.Option(..., "--end", help="Last filing date of the window (YYYY-MM-DD)."),
    forms: str | None = typer.Option(
        None, "--forms", help="Comma-separated form types to keep, e.g. 8-K,10-Q."
    ),
    name: str = typer.Option(..., "--name", help="Release name."),
    out: Path = typer.Option(
        ..., "--out", help="Directory to write the release to (must not exist or be empty)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it already holds files."),
    key_seed: str = typer.Option(
        "",
        "--key-seed",
        envvar="EVALKIT_RELEASE_KEY_SEED",
        show_default=False,
        help="A private seed for the row-key key (also from $EVALKIT_RELEASE_KEY_SEED). Without one, whoever "
        "holds the same inputs can rebuild the key.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Build a release from EDGAR index files and/or submissions JSON. Same inputs (and key seed), byte-identical release."""
    from evalkit_core.edgar import build_edgar_release

    if submissions is None and index is None:
        raise ConfigError("give at least one of --submissions DIR and --index DIR")
    form_list = [f.strip() for f in forms.split(",") if f.strip()] if forms is not None else None
    if form_list is not None and not form_list:
        raise ConfigError(f"--forms: expected comma-separated form types such as 8-K,10-Q, got {forms!r}")
    kwargs: dict[str, Any] = {
        "name": name,
        "start": _date(start, "--start"),
        "end": _date(end, "--end"),
        "submissions": submissions,
        "index": index,
        "tickers": tickers,
        "forms": form_list,
        "overwrite": force,
        "key_seed": key_seed,
    }
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (
            TextColumn("{task.description:<22}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            result = build_edgar_release(out, progress=_Reporter(progress), **kwargs)
    else:
        result = build_edgar_release(out, **kwargs)
    summary = build_summary(result)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    cov = summary["acceptance_coverage"]
    typer.echo(f"wrote {summary['path']}  rows {summary['rows']}  {summary['content_digest']}")
    typer.echo(f"window    {summary['window']['start']} .. {summary['window']['end']}")
    typer.echo(f"accepted  {cov['rows_with_acceptance_at']} rows carry acceptance_at ({cov['share']:.1%})")
    flags = ", ".join(f"{k} {v}" for k, v in summary["flags_by_reason"].items()) or "none"
    typer.echo(f"flagged   {flags}")
    typer.echo(
        f"disseminated_at on {summary['rows_with_disseminated_at']} rows; "
        f"it moved {summary['pit_entries_moved_by_dissemination']} pit entries"
    )
