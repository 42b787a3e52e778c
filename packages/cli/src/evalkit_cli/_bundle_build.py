"""``evalkit bundle build``: build a release from EDGAR metadata the user downloaded (see docs/edgar.md)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from evalkit_core import ConfigError

if TYPE_CHECKING:
    from evalkit_core.edgar import EdgarBuild

__all__ = ["build", "build_summary"]


def _date(value: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{option}: expected a date YYYY-MM-DD, got {value!r}") from None


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
    end: str = typer.Option(..., "--end", help="Last filing date of the window (YYYY-MM-DD), or 'latest': the newest filing date in the inputs."),
    forms: str | None = typer.Option(
        None, "--forms", help="Comma-separated form types to keep, e.g. 8-K,10-Q."
    ),
    name: str = typer.Option(..., "--name", help="Release name."),
    out: Path = typer.Option(
        ..., "--out", help="Directory to write the release to (must not exist or be empty)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it already holds files."),
    key_seed: str | None = typer.Option(
        None,
        "--key-seed",
        envvar="EVALKIT_RELEASE_KEY_SEED",
        show_default=False,
        help="A private seed for the row-key key and the mask secret (also from $EVALKIT_RELEASE_KEY_SEED); the "
        "same inputs and seed give the same bytes. Without one a seed is drawn from os.urandom and not kept: the "
        "release cannot be rebuilt byte for byte, and nobody can rebuild its masks from the public inputs.",
    ),
    built_on: str | None = typer.Option(None, "--built-on", help="The build date recorded in OUT/build.json, outside every digest \\[default: today, UTC]."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    show_progress: bool = typer.Option(False, "--progress", help="Show progress on stderr even when it is not a terminal (plain lines)."),
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
        "end": None if end == "latest" else _date(end, "--end"),
        "built_on": _date(built_on, "--built-on") if built_on is not None else dt.datetime.now(dt.UTC).date(),
        "submissions": submissions,
        "index": index,
        "tickers": tickers,
        "forms": form_list,
        "overwrite": force,
        "key_seed": key_seed,
    }
    from evalkit_cli._progress import progress_bar

    with progress_bar("building", enabled=not as_json, force=show_progress, stages=True) as show:
        if show is None:
            result = build_edgar_release(out, **kwargs)
        else:
            shown = show

            def report(stage: str, done: int, total: int) -> None:
                shown(done, total, stage)

            result = build_edgar_release(out, progress=report, **kwargs)
    summary = build_summary(result)
    summary["built_on"] = kwargs["built_on"].isoformat()
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    cov = summary["acceptance_coverage"]
    typer.echo(f"wrote {summary['path']}  rows {summary['rows']}  {summary['content_digest']}")
    typer.echo(f"window    {summary['window']['start']} .. {summary['window']['end']}")
    typer.echo(f"built on  {kwargs['built_on'].isoformat()} (in {out}/build.json, outside the digests)")
    typer.echo(f"accepted  {cov['rows_with_acceptance_at']} rows carry acceptance_at ({cov['share']:.1%})")
    flags = ", ".join(f"{k} {v}" for k, v in summary["flags_by_reason"].items()) or "none"
    typer.echo(f"flagged   {flags}")
    typer.echo(
        f"disseminated_at on {summary['rows_with_disseminated_at']} rows; "
        f"it moved {summary['pit_entries_moved_by_dissemination']} pit entries"
    )
