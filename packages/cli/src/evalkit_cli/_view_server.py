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
import threading
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import attrs

__all__ = ["Catalog", "Item", "ViewServer", "scan"]

SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".nox", "site-packages"}
MAX_FILES = 20_000
MAX_JSON_BYTES = 4 << 20
RESULT_CHARS = 60_000  # how much of one tool answer a session page shows (the trajectory has it whole)


@attrs.frozen
class Item:
    kind: str  # "pit" | "eval" | "campaign"
    target: str  # a file path, or a campaign name
    label: str
    home: str | None = None


@attrs.define
class Catalog:
    items: list[Item]
    roots: list[str]


def _walk(root: Path) -> Iterator[Path]:
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith((".json", ".jsonl")):
                seen += 1
                if seen > MAX_FILES:
                    return
                yield Path(dirpath) / name


def _kind_of_file(path: Path) -> tuple[str, str] | None:
    from evalkit_cli._report_data import EVAL_KIND, PIT_KIND

    try:
        if path.stat().st_size > MAX_JSON_BYTES and path.suffix == ".json":
            return None
        if path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as fh:
                first = json.loads(fh.readline() or "null")
            if isinstance(first, dict) and {"task_id", "public", "hidden"} <= cast("dict[str, Any]", first).keys() \
                    and "model_id" not in first:
                return "eval", f"eval results {path.name}"
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    body = cast("dict[str, Any]", data).get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        return None
    b = cast("dict[str, Any]", body)
    if b.get("kind") == PIT_KIND:
        return "pit", f"PIT run {b.get('run_id')} ({cast('dict[str, Any]', b.get('agent') or {}).get('spec')})"
    if b.get("kind") == EVAL_KIND:
        solver = cast("dict[str, Any]", b.get("solver") or {})
        return "eval", f"eval receipt {solver.get('model_id') or solver.get('name')} ({path.name})"
    return None


def _campaigns(home: Path) -> list[str]:
    from evalkit_core.store import Store, store_exists

    if not store_exists(home):  # $EVALKIT_STORE (a PostgreSQL URL or a file) counts, as for every command
        return []
    with Store.open(home) as store, store.snapshot() as db:
        return [str(r[0]) for r in db.execute("SELECT name FROM campaigns WHERE name IS NOT NULL ORDER BY name")]


def scan(directory: Path, home: Path) -> Catalog:
    """Everything the view can show under ``directory`` and ``home`` (files once each, in path order)."""
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
            found = _kind_of_file(path)
            if found is not None:
                items.append(Item(found[0], str(path), f"{found[1]}: {path}"))
    for name in _campaigns(home):
        items.append(Item("campaign", name, f"campaign {name}", str(home)))
    return Catalog(items, [str(directory), str(home)])


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
    daemon_threads = True

    def __init__(self, address: tuple[str, int], catalog: Catalog) -> None:
        super().__init__(address, _Handler)
        self.catalog = catalog
        self._models: dict[int, dict[str, Any]] = {}
        self._cells: dict[int, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._js: str | None = None

    def preload(self, js: str) -> None:
        self._js = js

    def js(self) -> str:
        from evalkit_cli._report_html import plotly_js

        if self._js is None:
            self._js = plotly_js()
        return self._js

    def model(self, n: int) -> dict[str, Any]:
        from evalkit_cli._report_data import campaign_model, eval_model, pit_model

        with self._lock:
            if n not in self._models:
                item = self.catalog.items[n]
                home = Path(item.home) if item.home else None
                if item.kind == "pit":
                    self._models[n] = pit_model(Path(item.target), trajectory=None, bundle=None, prices=None, home=None)
                elif item.kind == "eval":
                    self._models[n] = eval_model(Path(item.target), tasks=None)
                else:
                    self._models[n] = campaign_model(item.target, home=home)
            return self._models[n]

    def cells(self, n: int) -> list[dict[str, Any]]:
        from evalkit_cli._report_data import trajectory_cells

        model = self.model(n)
        with self._lock:
            if n not in self._cells:
                traj = model["source"]["trajectory"]
                self._cells[n] = trajectory_cells(Path(traj)) if traj else []
            return self._cells[n]


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

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815 - http.server's dispatch names

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        from evalkit_core import EvalkitError

        parts = [p for p in urlsplit(self.path).path.split("/") if p]
        if parts == ["favicon.ico"]:
            self._send(HTTPStatus.NO_CONTENT, "", "image/x-icon")
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
            return self._index()
        items = self.server.catalog.items
        if parts[0] != "item" or len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) >= len(items):
            return None
        n = int(parts[1])
        item = items[n]
        if len(parts) == 2:
            from evalkit_cli._report_html import render_page

            return render_page(self.server.model(n), self.server.js(), _nav(n, item))
        if parts[2] != "trajectory" or item.kind != "pit":
            return None
        if len(parts) == 3:
            return self._trajectory(n)
        if len(parts) == 5 and parts[3].isdigit() and parts[4].isdigit():
            cells = self.server.cells(n)
            ci, si = int(parts[3]), int(parts[4])
            if ci < len(cells) and si < len(cells[ci]["sessions"]):
                return self._session(n, ci, si)
        return None

    def _index(self) -> str:
        cat = self.server.catalog
        rows: list[str] = []
        for n, item in enumerate(cat.items):
            extra = f' &middot; <a href="/item/{n}/trajectory">trajectory</a>' if item.kind == "pit" else ""
            rows.append(f'<tr data-kind="{item.kind}"><td>{_e(item.kind)}</td>'
                        f'<td><a href="/item/{n}">{_e(item.label)}</a>{extra}</td></tr>')
        body = (
            f'<p class="note">Found under {_e(" and ".join(cat.roots))} when the view started; read-only.</p>'
            + ('<table id="items"><thead><tr><th>kind</th><th>what</th></tr></thead><tbody>'
               + "".join(rows) + "</tbody></table>" if rows else "<p>Nothing found: no PIT receipt, eval or campaign.</p>")
        )
        return _plain_page("evalkit view", f"<section>{body}</section>")

    def _trajectory(self, n: int) -> str:
        cells = self.server.cells(n)
        model = self.server.model(n)
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

    def _session(self, n: int, ci: int, si: int) -> str:
        cells = self.server.cells(n)
        model = self.server.model(n)
        cell = cells[ci]
        session = cell["sessions"][si]
        wanted = set(session["lines"])
        events: list[dict[str, Any]] = []
        with Path(model["source"]["trajectory"]).open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i in wanted:
                    events.append(cast("dict[str, Any]", json.loads(line)))
                if i > session["lines"][-1]:
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
