"""``evalkit view [DIR]``: the command; the server lives in :mod:`evalkit_cli._view_server` (loaded on use)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["LOOPBACK", "view_command"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def view_command(
    directory: Path = typer.Argument(Path(), help="Where to look for PIT receipts, eval receipts and results files (with $EVALKIT_HOME)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="TCP port (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Loopback address to listen on: 127.0.0.1 (default), ::1 or localhost. The view serves this machine only."),
    home: Path | None = typer.Option(None, "--home", help="Store directory (default: $EVALKIT_HOME, else .evalkit/)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was found and the address as one JSON line, then serve."),
) -> None:
    """Serve a local, read-only web view of the runs, evals and campaigns found (same pages as evalkit report,
    plus a PIT trajectory browser). Ctrl-C stops it."""
    import attrs

    from evalkit_cli._report_html import plotly_js
    from evalkit_cli._view_server import ViewServer, scan
    from evalkit_core import ConfigError
    from evalkit_core.store import evalkit_home

    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory (evalkit view DIR)")
    if host not in LOOPBACK:
        raise ConfigError(f"--host {host}: the view serves this machine only (expected one of {', '.join(LOOPBACK)})")
    js = plotly_js()  # the extra is checked before the server starts
    store_home = home if home is not None else evalkit_home()
    catalog = scan(directory, store_home)
    try:
        server = ViewServer((host, port), catalog, rescan=(directory, store_home))
    except OSError as exc:
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror})") from None
    server.preload(js)
    bound_host, bound_port = server.server_address[:2]
    url = f"http://[{bound_host}]:{bound_port}/" if ":" in str(bound_host) else f"http://{bound_host}:{bound_port}/"
    if as_json:
        typer.echo(json.dumps({"url": url, "roots": catalog.roots, "items": [attrs.asdict(i) for i in catalog.items]}), nl=True)
    else:
        typer.echo(f"evalkit view: {len(catalog.items)} item(s) at {url} (read-only; Ctrl-C stops it)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
