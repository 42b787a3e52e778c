"""``evalkit bundle``: make, inspect and check releases."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, cast

import typer

from evalkit_core import ConfigError

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Build, inspect and check releases (bundles).")


def _date(value: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{option}: expected a date YYYY-MM-DD, got {value!r}") from None


@app.command("synth")
def synth(
    rows: int = typer.Option(..., "--rows", min=1, help="Number of filings to generate."),
    start: str = typer.Option(..., "--start", help="First filing date of the window (YYYY-MM-DD)."),
    end: str = typer.Option(..., "--end", help="Last filing date of the window (YYYY-MM-DD)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Random seed: the same seed gives a byte-identical release."),
    out: Path = typer.Option(..., "--out", help="Directory to write the release to (must not exist or be empty)."),
    name: str | None = typer.Option(None, "--name", help="Release name (default synthetic-SEED-ROWS)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it already holds files."),
    key_seed: str = typer.Option(
        "",
        "--key-seed",
        show_default=False,
        help="A private seed for the row-key key and the mask secret (the shifted arm's offset). Without one "
        "they follow from --seed, so whoever runs the generator with the same seed rebuilds them.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Generate a synthetic release with the shape of real EDGAR metadata (same options, same bytes)."""
    from evalkit_core._synth import write_synth_release

    target = write_synth_release(
        out,
        rows=rows,
        start=_date(start, "--start"),
        end=_date(end, "--end"),
        seed=seed,
        name=name,
        overwrite=force,
        key_seed=key_seed,
    )
    _print_summary(target, as_json=as_json)


@app.command("demo")
def demo(
    out: Path = typer.Option(..., "--out", help="Directory to write the demo release to."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it already holds files."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the built-in demo release (synthetic, deterministic) and its synthetic prices."""
    from evalkit_core._synth import write_demo_release

    target = write_demo_release(out, overwrite=force)
    _print_summary(target, as_json=as_json)


def _print_summary(target: Path, *, as_json: bool = False) -> None:
    manifest = json.loads((target / "release.json").read_text())
    if as_json:
        payload = {
            "path": str(target),
            "name": manifest.get("name"),
            "rows": manifest["row_counts"]["rows"],
            "content_digest": manifest["content_digest"],
            "format": manifest.get("format"),
            "mask_secret_sha256": _secret_digest(manifest),
        }
        typer.echo(json.dumps(payload, sort_keys=True))
        return
    typer.echo(f"wrote {target}  rows {manifest['row_counts']['rows']}  {manifest['content_digest']}")


def _secret_digest(manifest: dict[str, Any]) -> str | None:
    value = _field(_field(manifest.get("masks"), "shift"), "secret_sha256")
    return value if isinstance(value, str) else None


def _field(obj: object, key: str) -> object:
    return cast("dict[str, object]", obj).get(key) if isinstance(obj, dict) else None


def release_info(root: Path) -> dict[str, Any]:
    """What ``bundle info`` shows, as JSON-ready data."""
    from evalkit_core import Release

    release = Release.load(root)
    main = release.arm("main")
    rows = main.height
    accepted = int(main.get_column("acceptance_at").is_not_null().sum())
    disseminated = int(main.get_column("disseminated_at").is_not_null().sum())
    counts = release.manifest["row_counts"]["by_form"]
    return {
        "path": str(release.root),
        "name": release.name,
        "window": dict(release.manifest["window"]),
        "rows": rows,
        "forms": dict(counts),
        "acceptance_coverage": {"rows_with_acceptance_at": accepted, "share": round(accepted / rows, 6) if rows else 0},
        "rows_with_disseminated_at": disseminated,
        "provenance_kind": release.manifest.get("provenance", {}).get("kind"),
        "content_digest": release.content_digest,
        "format": release.format,
        "masks": {
            "shift_scheme": release.shift.scheme,
            "mask_secret_sha256": release.masks.secret_sha256,
        },
    }


@app.command("info")
def info(
    path: Path = typer.Argument(..., help="Release directory."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Show a release's window, forms, counts, acceptance coverage and content digest."""
    data = release_info(path)
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    cov = data["acceptance_coverage"]
    typer.echo(f"release   {data['name']}  ({data['provenance_kind'] or 'unknown provenance'})")
    typer.echo(f"path      {data['path']}")
    typer.echo(f"window    {data['window']['start']} .. {data['window']['end']}")
    typer.echo(f"rows      {data['rows']}")
    typer.echo(f"accepted  {cov['rows_with_acceptance_at']} rows carry acceptance_at ({cov['share']:.1%})")
    typer.echo(f"digest    {data['content_digest']}")
    typer.echo(f"format    {data['format']}")
    masks = data["masks"]
    if masks["mask_secret_sha256"] is None:
        typer.echo(f"shift     {masks['shift_scheme']}: the public ten-year map, which anyone can invert (rebuild the release)")
    else:
        typer.echo(f"shift     {masks['shift_scheme']}, mask secret {masks['mask_secret_sha256']} (the secret is in the masks file only)")
    typer.echo("forms")
    for form, n in sorted(data["forms"].items(), key=lambda kv: (-kv[1], kv[0])):
        typer.echo(f"  {form:<12} {n:>8}")


@app.command("check")
def check(
    path: Path = typer.Argument(..., help="Release directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (same exit code)."),
) -> None:
    """Recompute every digest the release binds; exit 2 naming each mismatch."""
    from evalkit_core import ReleaseError, check_release

    problems = check_release(path)
    fmt = _manifest_format(path)
    if as_json:
        typer.echo(
            json.dumps({"path": str(path), "ok": not problems, "format": fmt, "problems": [str(p) for p in problems]})
        )
        if problems:
            raise typer.Exit(2)
        return
    if problems:
        for p in problems:
            typer.echo(f"MISMATCH  {p}", err=True)
        raise ReleaseError(f"{path}: {len(problems)} digest mismatch(es)")
    typer.echo(f"ok  {path}: every digest, row key and shifted session matches ({fmt})")
    if fmt == LEGACY_FORMAT:
        typer.echo(
            f"note  {path}: format {fmt}: the shifted arm is the public ten-year map, which anyone can invert; "
            "rebuild the release for a secret shift"
        )


LEGACY_FORMAT = "evalkit-release/2"


def _manifest_format(path: Path) -> str | None:
    try:
        value = json.loads((path / "release.json").read_bytes()).get("format")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


from evalkit_cli._bundle_build import build  # noqa: E402  (the build command lives in its own module)

app.command("build")(build)
