"""The server behind ``evalkit view [DIR]``: a local, read-only web view of the runs, evals and campaigns under DIR and the store.

Standard library only (``http.server``): one thread per request, GET and HEAD only, bound to loopback unless
``--host`` says otherwise. It lists what it finds when it starts (PIT receipts, eval receipts and results files,
campaigns in the store) and serves only those, by number, so no URL can name a file of its own choosing. Each
item's page is the page ``evalkit report`` writes; a PIT run also gets a trajectory browser, session by session.
Nothing is written: files are read, the store is read in snapshots.
"""

from __future__ import annotations

import html
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import attrs

from evalkit_cli._view_index import Item, campaign_items, describe, fold
from evalkit_cli._view_page import index_json, index_page

__all__ = ["Catalog", "Item", "ViewServer", "scan"]

SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".nox", "site-packages"}
MAX_FILES = 20_000
RESULT_CHARS = 60_000  # how much of one tool answer a session page shows (the trajectory has it whole)


@attrs.define
class Catalog:
    items: list[Item]
    roots: list[str]


def _walk(root: Path) -> Iterator[Path]:
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith((".json", ".jsonl", ".partial")):
                seen += 1
                if seen > MAX_FILES:
                    return
                yield Path(dirpath) / name


def scan(directory: Path, home: Path) -> Catalog:
    """Everything the view can show under ``directory`` and ``home`` (files once each, in path order), one row
    per run (see :mod:`evalkit_cli._view_index`)."""
    items: list[Item] = []
    seen: set[Path] = set()
    for root in (directory, home):
        if not root.is_dir():
            continue
        for path in _walk(root):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            found = describe(path)
            if found is not None:
                items.append(found)
    return Catalog([*fold(items), *campaign_items(home)], [str(directory), str(home)])


# ------------------------------------------------------------------------------------------------ pages

_STYLE_EXTRA = """
.traj td,.traj th{font-size:13px}pre.json{background:#f3f5f8;padding:8px;overflow:auto;max-height:420px;
font-size:12px;white-space:pre-wrap;word-break:break-word}details{margin:6px 0}summary{cursor:pointer}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _plain_page(title: str, body: str) -> str:
    from evalkit_cli._report_html import CSP, STYLE

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><title>{_e(title)}</title>'
        f"<style>{STYLE}{_STYLE_EXTRA}</style></head><body><header><h1>{_e(title)}</h1>"
        f'<nav><a href="/">all runs, evals and campaigns</a></nav></header><main>{body}</main></body></html>\n'
    )


def _nav(n: int, item: Item) -> str:
    links = ['<a href="/">all runs, evals and campaigns</a>']
    if item.kind == "pit":
        links.append(f'<a href="/item/{n}/trajectory">trajectory, session by session</a>')
    return "<nav>" + "".join(links) + "</nav>"


def _pretty(value: object, limit: int = RESULT_CHARS) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) > limit:
        text = text[:limit] + f"\n... ({len(text) - limit} more characters in the trajectory)"
    return f'<pre class="json">{_e(text)}</pre>'


class ViewServer(ThreadingHTTPServer):
    """The view's server. Its catalog is scanned again (at most once a second) when the index or its JSON is asked
    for, so runs that start, progress or end while it serves appear; an item keeps its number for the server's life
    (a number is given to a run the first time it is found and never to another), so links stay good."""

    daemon_threads = True
    RESCAN_SECONDS = 1.0

    def __init__(self, address: tuple[str, int], catalog: Catalog, *, rescan: tuple[Path, Path] | None = None) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self._lock = threading.Lock()
        self._numbers: dict[tuple[str, str], int] = {}
        self.catalog = catalog
        self.current: dict[int, Item] = {}
        self._place(catalog)
        self._rescan = rescan
        self._scanned = time.monotonic()
        self._models: dict[int, tuple[Item, dict[str, Any]]] = {}
        self._cells: dict[int, tuple[Item, list[dict[str, Any]]]] = {}
        self._js: str | None = None

    def _place(self, catalog: Catalog) -> None:
        current: dict[int, Item] = {}
        for item in catalog.items:
            key = (item.kind, item.target)
            n = self._numbers.setdefault(key, len(self._numbers))
            current[n] = item
        self.catalog, self.current = catalog, current

    def refresh(self) -> None:
        with self._lock:
            if self._rescan is None or time.monotonic() - self._scanned < self.RESCAN_SECONDS:
                return
            self._place(scan(*self._rescan))
            self._scanned = time.monotonic()

    def item(self, n: int) -> Item | None:
        with self._lock:
            return self.current.get(n)

    def rows(self) -> list[tuple[int, Item]]:
        with self._lock:
            return sorted(self.current.items())

    def preload(self, js: str) -> None:
        self._js = js

    def js(self) -> str:
        from evalkit_cli._report_html import plotly_js

        if self._js is None:
            self._js = plotly_js()
        return self._js

    def model(self, n: int, item: Item) -> dict[str, Any]:
        """The report model of item ``n``, made again when its row changed (a campaign that progressed)."""
        from evalkit_cli._report_data import campaign_model, eval_model, pit_model

        with self._lock:
            cached = self._models.get(n)
            if cached is not None and cached[0] == item:
                return cached[1]
        home = Path(item.home) if item.home else None
        if item.kind == "pit":
            model = pit_model(Path(item.target), trajectory=None, bundle=None, prices=None, home=None)
        elif item.kind == "eval":
            model = eval_model(Path(item.target), tasks=None)
        else:
            model = campaign_model(item.target, home=home)
        with self._lock:
            self._models[n] = (item, model)
        return model

    def cells(self, n: int, item: Item) -> list[dict[str, Any]]:
        from evalkit_cli._report_data import trajectory_cells

        model = self.model(n, item)
        with self._lock:
            cached = self._cells.get(n)
            if cached is not None and cached[0] == item:
                return cached[1]
        traj = model["source"]["trajectory"]
        cells = trajectory_cells(Path(traj), _line_bound(model)) if traj else []
        with self._lock:
            self._cells[n] = (item, cells)
        return cells


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer  # pyright: ignore[reportIncompatibleVariableOverride]
    server_version = "evalkit-view"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ARG002 - the base class's signature
        return  # quiet: the terminal shows the address and nothing else

    def _send(self, status: HTTPStatus, body: str, content_type: str = "text/html; charset=utf-8") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, _plain_page("read-only", "<p>This view only reads.</p>"))

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815 - http.server's dispatch names

    def do_HEAD(self) -> None:
        self.do_GET()

    def _host_ok(self) -> bool:
        """The Host header names this server's loopback address (or localhost): a page on another site that
        re-points its own name at 127.0.0.1 (DNS rebinding) is refused, so it cannot read the view."""
        port = self.server.server_address[1]
        host = (self.headers.get("Host") or "").strip().lower()
        return host in {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}

    def do_GET(self) -> None:
        from evalkit_core import EvalkitError

        if not self._host_ok():
            self._send(HTTPStatus.FORBIDDEN, _plain_page("refused", "<p>This view answers its loopback address only.</p>"))
            return
        parts = [p for p in urlsplit(self.path).path.split("/") if p]
        if parts == ["favicon.ico"]:
            self._send(HTTPStatus.NO_CONTENT, "", "image/x-icon")
            return
        if parts == ["index.json"]:
            self.server.refresh()
            self._send(HTTPStatus.OK, json.dumps(index_json(self.server.rows()), sort_keys=True),
                       "application/json; charset=utf-8")  # fmt: skip
            return
        try:
            page = self._route(parts)
        except EvalkitError as exc:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, _plain_page("cannot show this", f"<p class=bad>{_e(exc)}</p>"))
            return
        if page is None:
            self._send(HTTPStatus.NOT_FOUND, _plain_page("not found", f"<p>{_e(self.path)}: nothing here.</p>"))
            return
        self._send(HTTPStatus.OK, page)

    def _route(self, parts: list[str]) -> str | None:
        if not parts:
            self.server.refresh()
            return index_page(self.server.rows(), self.server.catalog.roots)
        if parts[0] != "item" or len(parts) < 2 or not parts[1].isdigit():
            return None
        n = int(parts[1])
        item = self.server.item(n)
        if item is None:
            return None
        if item.kind == "journal":
            return _plain_page(item.label, f"<p>{_e(item.status)}: {_e(item.detail)}. The results and the receipt "
                               "appear in the index when the eval ends.</p>") if len(parts) == 2 else None
        if len(parts) == 2:
            from evalkit_cli._report_html import render_page

            return render_page(self.server.model(n, item), self.server.js(), _nav(n, item))
        if parts[2] != "trajectory" or item.kind != "pit":
            return None
        if len(parts) == 3:
            return self._trajectory(n, item)
        if len(parts) == 5 and parts[3].isdigit() and parts[4].isdigit():
            cells = self.server.cells(n, item)
            ci, si = int(parts[3]), int(parts[4])
            if ci < len(cells) and si < len(cells[ci]["sessions"]):
                return self._session(n, item, ci, si)
        return None

    def _trajectory(self, n: int, item: Item) -> str:
        cells = self.server.cells(n, item)
        model = self.server.model(n, item)
        out: list[str] = [(f'<p><a href="/item/{n}">the run\'s report</a> &middot; trajectory '
                          f'<code>{_e(model["source"]["trajectory"])}</code></p>')]
        for ci, cell in enumerate(cells):
            name = "probe" if cell["arm"] == "probe" else f"{cell['arm']} / {cell['clock']}"
            rows = "".join(
                f'<tr><td><a href="/item/{n}/trajectory/{ci}/{si}">{_e(s["session_date"])}</a></td>'
                f'<td class=r>{s["tool_calls"]}</td><td class=r>{s["picks"]}</td><td class=r>{s["rejected"]}</td></tr>'
                for si, s in enumerate(cell["sessions"])
            )
            out.append(f"<details{' open' if ci == 0 else ''}><summary>{_e(name)}: {len(cell['sessions'])} sessions"
                       f'</summary><table class="traj"><thead><tr><th>session</th><th class=r>tool calls</th>'
                       f"<th class=r>picks</th><th class=r>rejected</th></tr></thead><tbody>{rows}</tbody></table></details>")
        return _plain_page(f"{model['title']}: trajectory", f"<section>{''.join(out)}</section>")

    def _session(self, n: int, item: Item, ci: int, si: int) -> str:
        cells = self.server.cells(n, item)
        model = self.server.model(n, item)
        cell = cells[ci]
        session = cell["sessions"][si]
        wanted = set(session["lines"])
        events: list[dict[str, Any]] = []
        from evalkit.pit import trajectory_lines
        from evalkit_cli._report_pit import trajectory_event

        path = Path(model["source"]["trajectory"])
        lines = trajectory_lines(path, _line_bound(model))  # plain or zstd-compressed
        for i, line in enumerate(lines):
            if i in wanted:
                events.append(trajectory_event(path, i, line))
            if i > session["lines"][-1]:
                lines.close()
                break
        parts: list[str] = []
        for e in events:
            kind = e.get("type")
            if kind == "agent_call":
                parts.append(f"<h2>Sent to the agent</h2><pre class=json>{_e(e.get('prompt', ''))}</pre>")
            elif kind == "tool_call":
                args = e.get("args")
                parts.append(f"<details><summary>tool call <code>{_e(e.get('tool', ''))}</code> "
                             f"<code>{_e(json.dumps(args, sort_keys=True))}</code></summary>"
                             f"{_pretty(e.get('result'))}</details>")
            elif kind == "model_call":
                parts.append(f"<details open><summary>model call</summary>{_pretty(e)}</details>")
            elif kind == "decision":
                picks = cast("list[str]", e.get("picks") or [])
                parts.append(
                    f"<h2>Answer and picks</h2><pre class=json>{_e(e.get('text', ''))}</pre>"
                    f"<p>{len(picks)} picks accepted: <code>{_e(' '.join(picks))}</code></p>"
                    + (f"<p class=bad>rejected: <code>{_e(json.dumps(e.get('rejected'), sort_keys=True))}</code></p>"
                       if e.get("rejected") else "")
                )
            elif kind == "probe_item":
                parts.append(f"<h2>Probe answer</h2>{_pretty({k: v for k, v in e.items() if k not in {'type', 'seq'}})}")
            else:
                parts.append(f"<h2>{_e(kind)}</h2>{_pretty(e)}")
        name = "probe" if cell["arm"] == "probe" else f"{cell['arm']} / {cell['clock']}"
        prev_link = f'<a href="/item/{n}/trajectory/{ci}/{si - 1}">previous session</a>' if si > 0 else ""
        next_link = (f'<a href="/item/{n}/trajectory/{ci}/{si + 1}">next session</a>'
                     if si + 1 < len(cell["sessions"]) else "")
        nav = f'<p><a href="/item/{n}/trajectory">all sessions</a> {prev_link} {next_link}</p>'
        title = f"{model['title']}: {name}, session {session['session_date']}"
        return _plain_page(title, f"<section>{nav}{''.join(parts)}</section>")


def _line_bound(model: Mapping[str, Any]) -> int:
    """The longest trajectory line this run's receipt allows (its cell bound, plus slack): what the view reads."""
    from evalkit.pit import line_bound
    from evalkit_core import ReceiptError, read_receipt

    try:
        body = read_receipt(Path(model["source"]["receipt"]))["body"]
    except (ReceiptError, OSError, KeyError, TypeError):
        body = None
    return line_bound(cast("Mapping[str, Any]", body) if isinstance(body, Mapping) else None)
