"""One self-contained HTML page per report model (:mod:`evalkit_cli._report_data`).

Every number on the page is written from the model by :func:`_num`, which marks it with ``data-path`` (where in
the model's JSON it comes from) so a test can hold each one against ``evalkit report --json``. Charts are
plotly.js figures; plotly.js itself (from the ``plotly`` package of the ``evalkit-harness[report]`` extra) is inlined, as
is the page's own script, and a Content-Security-Policy that allows no request at all keeps it that way: the page
opens from disk with no network. The same page is what ``evalkit view`` serves.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from evalkit_core import ConfigError

__all__ = ["EXTRA_MISSING", "plotly_js", "render_page"]

EXTRA_MISSING = "charts need plotly: install the report extra (pip install 'evalkit-harness[report]')"

CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
)


def plotly_js() -> str:
    """plotly.js from the installed ``plotly`` package (the ``evalkit-harness[report]`` extra); ConfigError if absent."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ConfigError(EXTRA_MISSING) from None
    return get_plotlyjs()


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: object, fmt: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, int | float):
        return str(value)
    if fmt == "pct":
        return f"{value * 100:.1f}%"
    if fmt == "ret":
        return f"{value * 100:+.3f}%"
    if fmt == "usd":
        return f"${value:.6f}"
    if fmt == "int":
        return f"{int(value)}"
    return f"{value:.6g}"


def _num(value: object, path: str, fmt: str = "int") -> str:
    """A number from the model, marked with where it comes from (``data-path``) and how it is shown."""
    return f'<span class="num" data-path="{_e(path)}" data-fmt="{fmt}">{_e(_fmt(value, fmt))}</span>'


def _interval(value: object, path: str) -> str:
    """A 95% interval ``[low, high]`` of the model as two marked numbers (n/a when there is none)."""
    if not isinstance(value, list | tuple) or len(cast("Sequence[object]", value)) != 2:
        return '<span class="na">n/a</span>'
    low, high = cast("Sequence[object]", value)
    return f"{_num(low, path + '.0', 'pct')} to {_num(high, path + '.1', 'pct')}"


def _sortkey(value: object) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    return "" if value is None else str(value)


def _json_script(element_id: str, data: object) -> str:
    # Every "<" written as its JSON escape: the data holds text a candidate wrote (its code), and inside a script
    # element "</script" would end the element and "<!--<script>" would put the HTML tokenizer in the "double
    # escaped" state, where the element's own closing tag no longer closes it and the page's scripts after it are
    # swallowed (no chart drawn, no table sorted). JSON.parse reads the escape back as "<".
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#1d2f45;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{opacity:.8;font-size:12px}header a{color:#cfe3ff}
main{padding:16px 24px;max-width:1400px}section{background:#fff;border:1px solid #dde1e6;border-radius:6px;
padding:12px 16px;margin:0 0 16px}h2{font-size:16px;margin:0 0 8px}p.note{color:#56606b;margin:4px 0 8px;font-size:13px}
table{border-collapse:collapse;font-size:13px}th,td{border-bottom:1px solid #e6e8eb;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f0f2f5}td.r,th.r{text-align:right}th[data-sort]{cursor:pointer;user-select:none}
th[data-sort]:after{content:" \\2195";color:#9aa3ad}.grid td{width:170px;height:84px;border:1px solid #ccd2d9}
.grid .ret{font-size:20px;font-weight:600}.grid .meta{font-size:12px;color:#56606b}.unreach{background:#fbf3e6}
.ok{color:#116329}.bad{color:#b42318}.warn{color:#9a6700}.pill{display:inline-block;border-radius:9px;padding:0 8px;
font-size:12px;border:1px solid currentColor}.chart{width:100%;height:380px}code,.digest{font-family:ui-monospace,
Menlo,monospace;font-size:12px;word-break:break-all}pre.code{background:#0f1720;color:#e6edf3;padding:10px;
overflow:auto;max-height:480px;font-size:12px}input.filter{padding:4px 8px;margin:0 8px 8px 0;width:260px}
select.filter{padding:3px;margin:0 8px 8px 0}.rowcount{color:#56606b;font-size:12px}button.code{font-size:12px}
tr.fail td:first-child{border-left:3px solid #b42318}tr.pass td:first-child{border-left:3px solid #116329}
nav a{margin-right:14px}
"""

SCRIPT = r"""
(function(){
  function cellValue(td){var v=td.getAttribute('data-v');return v===null?td.textContent.trim():v;}
  function sortTable(table,col,th){
    var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
    var asc=th.getAttribute('data-dir')!=='asc';
    Array.prototype.forEach.call(table.querySelectorAll('th'),function(h){h.removeAttribute('data-dir');});
    th.setAttribute('data-dir',asc?'asc':'desc');
    rows.sort(function(a,b){
      var x=cellValue(a.cells[col]),y=cellValue(b.cells[col]);var nx=parseFloat(x),ny=parseFloat(y);
      var c=(!isNaN(nx)&&!isNaN(ny)&&String(nx)!=='NaN')?nx-ny:(x<y?-1:x>y?1:0);return asc?c:-c;});
    rows.forEach(function(r){body.appendChild(r);});
  }
  function applyFilters(table){
    var id=table.id;var text=document.querySelector('input.filter[data-for="'+id+'"]');
    var sel=document.querySelectorAll('select.filter[data-for="'+id+'"]');var q=text?text.value.toLowerCase():'';
    var shown=0;
    Array.prototype.forEach.call(table.tBodies[0].rows,function(r){
      var ok=!q||r.textContent.toLowerCase().indexOf(q)>=0;
      Array.prototype.forEach.call(sel,function(s){if(s.value&&r.getAttribute('data-'+s.getAttribute('data-field'))!==s.value){ok=false;}});
      r.style.display=ok?'':'none';if(ok){shown++;}
    });
    var cnt=document.querySelector('.rowcount[data-for="'+id+'"]');if(cnt){cnt.textContent=shown+' of '+table.tBodies[0].rows.length+' rows';}
  }
  document.querySelectorAll('table.sortable').forEach(function(table){
    table.querySelectorAll('th[data-sort]').forEach(function(th,i){th.addEventListener('click',function(){sortTable(table,th.cellIndex,th);});});
    applyFilters(table);
  });
  document.querySelectorAll('input.filter,select.filter').forEach(function(el){
    el.addEventListener('input',function(){applyFilters(document.getElementById(el.getAttribute('data-for')));});
  });
  var codeData=document.getElementById('code-data');var codes=codeData?JSON.parse(codeData.textContent):{};
  document.querySelectorAll('button.code').forEach(function(b){
    b.addEventListener('click',function(){
      var box=document.getElementById('code-view');var title=document.getElementById('code-title');
      title.textContent=b.getAttribute('data-title');box.textContent=codes[b.getAttribute('data-code')]||'';
      document.getElementById('code-panel').style.display='block';box.scrollIntoView({block:'nearest'});
    });
  });
  var figs=document.getElementById('figures');
  if(figs&&window.Plotly){var all=JSON.parse(figs.textContent);
    Object.keys(all).forEach(function(id){var f=all[id];
      Plotly.newPlot(id,f.data,f.layout,{displayModeBar:false,responsive:true});});}
})();
"""


def _page(title: str, subtitle: str, body: str, figures: Mapping[str, Any], codes: Mapping[str, str],
          js: str, nav: str = "") -> str:
    plotly = js.replace("</script", "<\\/script")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
        f"<style>{STYLE}</style></head><body>"
        f'<header><h1>{_e(title)}</h1><div class="sub">{subtitle}</div>{nav}</header><main>{body}'
        '<section id="code-panel" style="display:none"><h2 id="code-title"></h2><pre class="code" id="code-view"></pre></section>'
        f"</main>{_json_script('figures', figures)}{_json_script('code-data', codes)}"
        f"<script>{plotly}</script><script>{SCRIPT}</script></body></html>\n"
    )


def render_page(model: Mapping[str, Any], js: str, nav: str = "") -> str:
    """The HTML page of a report model; ``js`` is plotly.js (:func:`plotly_js`), ``nav`` optional header links."""
    kind = model["kind"]
    if kind == "pit":
        body, figs, codes = _pit(model)
    elif kind == "eval":
        body, figs, codes = _eval(model)
    else:
        body, figs, codes = _campaign(model)
    sub = " &middot; ".join(f"{_e(k)}: <code>{_e(v)}</code>" for k, v in model["source"].items() if v is not None)
    return _page(str(model["title"]), sub, body, figs, codes, js, nav)


def _section(title: str, inner: str, sid: str = "") -> str:
    ident = f' id="{sid}"' if sid else ""
    return f"<section{ident}><h2>{_e(title)}</h2>{inner}</section>"


def _status(ok: object, good: str = "ok", bad: str = "no") -> str:
    cls = "ok" if ok else "bad"
    return f'<span class="pill {cls}">{_e(good if ok else bad)}</span>'


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _filters(table_id: str, selects: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    parts = [f'<input class="filter" data-for="{table_id}" placeholder="filter rows (any text)" type="search">']
    for field, label, values in selects:
        opts = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
        parts.append(
            f'<select class="filter" data-for="{table_id}" data-field="{field}" aria-label="{_e(label)}">'
            f'<option value="">{_e(label)}: all</option>{opts}</select>'
        )
    parts.append(f'<span class="rowcount" data-for="{table_id}"></span>')
    return "<div>" + "".join(parts) + "</div>"


def _layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "xaxis": {"title": {"text": xtitle}},
        "yaxis": {"title": {"text": ytitle}},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "font": {"family": "system-ui, sans-serif", "size": 12},
        **extra,
    }


# ------------------------------------------------------------------------------------------------ PIT


def _pit(m: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    run = m["run"]
    out: list[str] = []
    verdict = f"{_status(run['valid'], 'valid', 'invalid')} {_status(run['completed'], 'completed', 'stopped')}"
    window = cast("dict[str, Any]", run.get("window") or {})
    out.append(_section("Run", _kv_table([
        ("status", verdict + (f" invalidated by {_e(', '.join(run['invalidated_by']))}" if run["invalidated_by"] else "")),
        ("agent", f"<code>{_e(run['agent'])}</code>"),
        ("window", (f"{_e(window.get('start'))} to {_e(window.get('end'))}, "
                   f"{_num(window.get('sessions'), 'run.window.sessions')} sessions; hold "
                   f"{_num(run.get('hold_sessions'), 'run.hold_sessions')} sessions")),
        ("masks", _e(run["masks"])),
        ("receipt", f"{_e(run['receipt_version'])}, emitted {_e(run['emitted_at'])}"),
    ])))
    grid = m["grid"]
    cells = cast("list[dict[str, Any]]", grid["cells"])
    index = {(c["arm"], c["clock"]): i for i, c in enumerate(cells)}
    rows: list[str] = []
    for arm in grid["arms"]:
        tds: list[str] = []
        for clock in grid["clocks"]:
            i = index.get((arm, clock))
            if i is None:
                tds.append('<td class="cell">not run</td>')
                continue
            c, p = cells[i], f"grid.cells.{i}"
            tds.append(
                f'<td class="cell{"" if c["reachable"] else " unreach"}" data-arm="{_e(arm)}" data-clock="{_e(clock)}">'
                f'<div class="ret">{_num(c["total_return"], p + ".total_return", "ret")}</div>'
                f'<div class="meta">look-ahead {_num(c["lookahead_trades"], p + ".lookahead_trades")} of '
                f'{_num(c["lookahead_checked"], p + ".lookahead_checked")}</div>'
                f'<div class="meta">trades {_num(c["trades"], p + ".trades")}, unpriced '
                f'{_num(c["unpriced_trades"], p + ".unpriced_trades")}, rejected '
                f'{_num(c["rejected_picks"], p + ".rejected_picks")}</div>'
                + ("" if c["reachable"] else '<div class="meta warn">unreachable clock</div>') + "</td>"
            )
        rows.append(f"<tr><th>{_e(arm)}</th>{''.join(tds)}</tr>")
    head = "".join(f"<th>{_e(c)}</th>" for c in grid["clocks"])
    out.append(_section(
        "Cells: mean return per trade (arm x clock)",
        '<p class="note">Each cell: mean return per priced trade; trades entered before the filing was accepted '
        "(look-ahead) out of those with an acceptance time; unpriced and rejected picks. The leaky clock is "
        "unreachable in real time and shaded.</p>"
        f'<table class="grid" id="pit-grid"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>',
        "grid",
    ))
    figs: dict[str, Any] = {}
    cum = m["cumulative"]
    if cum["series"]:
        dates = cum["dates"]
        pct = cum["measure"] == "mean_return"
        figs["chart-cumulative"] = {
            "data": [
                {"type": "scatter", "mode": "lines", "name": f"{s['arm']}/{s['clock']}", "x": dates,
                 "y": [None if v is None else (v * 100 if pct else v) for v in s["values"]],
                 "line": {"dash": {"leaky": "dot", "dump": "dash", "pit": "solid"}.get(s["clock"], "solid")}}
                for s in cum["series"]
            ],
            "layout": _layout("", "session", "running mean return per trade (%)" if pct else "accepted picks"),
        }
    out.append(_section("Cumulative, per cell over sessions",
                        f'<p class="note">{_e(cum["note"])}</p><div class="chart" id="chart-cumulative"></div>', "cumulative"))
    deltas = "".join(
        f"<tr><td>{_e(d['clock'])}</td><td class=r>{_num(d.get('main_minus_redacted'), f'contamination.deltas.{i}.main_minus_redacted', 'ret')}</td>"
        f"<td class=r>{_num(d.get('main_minus_shifted'), f'contamination.deltas.{i}.main_minus_shifted', 'ret')}</td></tr>"
        for i, d in enumerate(m["contamination"]["deltas"])
    )
    out.append(_section("Contamination deltas", f'<p class="note">{_e(m["contamination"]["meaning"])}</p>'
                        "<table><thead><tr><th>clock</th><th class=r>main - redacted</th><th class=r>main - shifted</th>"
                        f"</tr></thead><tbody>{deltas}</tbody></table>", "contamination"))
    probe = m["probe"]
    items = "".join(
        f"<tr><td class=r>{_num(it['item'], f'probe.items.{i}.item')}</td><td><code>{_e(it['row_key'])}</code></td>"
        f"<td>{_status(not it['date_recovered'], 'no', 'RECOVERED')}</td><td>{_e('yes' if it['year_only'] else 'no')}</td>"
        f"<td>{_status(not it['issuer_recovered'], 'no', 'RECOVERED')} {_e(', '.join(it['issuer_matched_by'] or []))}</td>"
        f"<td>{_e(it['answer'])}</td></tr>"
        for i, it in enumerate(probe["items"])
    )
    holds = probe["verdict"] == "mask_holds"
    out.append(_section("Probe: do the masks leak?",
        f"<p>verdict {_status(holds, str(probe['verdict']), str(probe['verdict']))}: "
        f"{_num(probe['items_asked'], 'probe.items_asked')} items asked, dates recovered "
        f"{_num(probe['date_recovered'], 'probe.date_recovered')}, year only {_num(probe['year_only'], 'probe.year_only')}, "
        f"issuers recovered {_num(probe['issuer_recovered'], 'probe.issuer_recovered')}</p>"
        f'<p class="note">{_e(probe["stride_rule"])}</p>'
        "<table><thead><tr><th class=r>item</th><th>row_key</th><th>date</th><th>year only</th><th>issuer</th>"
        f"<th>answer</th></tr></thead><tbody>{items}</tbody></table>", "probe"))
    slots = "".join(
        f"<tr><td>{_e(s['slot'])}</td><td>{_status(not s['gap'], 'recorded', 'GAP')}</td>"
        f"<td><code>{_e(json.dumps(s['value'], sort_keys=True))}</code></td></tr>"
        for s in m["protocol"]["slots"]
    )
    out.append(_section("Protocol P1-P6",
        f"<p>complete {_status(m['protocol']['complete'], 'yes', 'no')}; gaps: {_e(', '.join(m['protocol']['gaps']) or 'none')}</p>"
        f"<table><thead><tr><th>slot</th><th>status</th><th>value</th></tr></thead><tbody>{slots}</tbody></table>", "protocol"))
    net = m["network"]
    attempts = "".join(f"<tr><td><code>{_e(json.dumps(a, sort_keys=True))}</code></td></tr>" for a in net["attempts"])
    out.append(_section("Network", _kv_table([
        ("clean", _status(net["clean"], "clean", "EGRESS ATTEMPTED")),
        ("egress attempts", _num(net["egress_attempts"], "network.egress_attempts")),
        ("policy", _e(net["policy"])), ("guard", _e(net["guard"])), ("scope", _e(net["scope"])),
    ]) + (f"<table><tbody>{attempts}</tbody></table>" if attempts else ""), "network"))
    checks = "".join(
        f"<tr><td>{_e(c['name'])}</td><td><span class=\"pill {'ok' if c['status'] == 'ok' else 'bad' if c['status'] == 'MISMATCH' else 'warn'}\">"
        f"{_e(c['status'])}</span></td><td>{_e(c['detail'])}</td></tr>"
        for c in m["verification"]["checks"]
    )
    digests = "".join(f"<tr><th>{_e(k)}</th><td class=digest>{_e(v)}</td></tr>"
                      for k, v in m["verification"]["digests"].items())
    out.append(_section("Verification",
        f'<table id="checks"><thead><tr><th>check</th><th>status</th><th>detail</th></tr></thead><tbody>{checks}</tbody></table>'
        f'<h2 style="margin-top:12px">Digests</h2><table>{digests}</table>', "verification"))
    return "".join(out), figs, {}


# ------------------------------------------------------------------------------------------------ eval


def _failing_html(failing: Sequence[Mapping[str, Any]]) -> str:
    if not failing:
        return ""
    shown = [
        f"{f['test']}: "
        + (str(f["detail"]) if str(f.get("detail") or "").startswith(str(f["reason"])) else
           f"{f['reason']}" + (f" ({f['detail']})" if f.get("detail") else ""))
        for f in failing[:6]
    ]
    more = f" (+{len(failing) - 6} more)" if len(failing) > 6 else ""
    return _e("; ".join(shown) + more)


def _eval(m: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    out: list[str] = []
    s, rates = m["summary"], m["rates"]
    solver = cast("dict[str, Any]", m.get("solver") or {})

    def rate_line(part: str) -> str:
        r = rates[part]
        return (f"{_num(r['rate'], f'rates.{part}.rate', 'pct')} ({_num(r['passed'], f'rates.{part}.passed')} of "
                f"{_num(r['n'], f'rates.{part}.n')} rollouts; 95% interval {_num(r['low'], f'rates.{part}.low', 'pct')}"
                f" to {_num(r['high'], f'rates.{part}.high', 'pct')})")

    out.append(_section("Pass rates", _kv_table([
        ("solver", f"<code>{_e(json.dumps(solver, sort_keys=True)) if solver else 'not recorded'}</code>"),
        ("tasks", (f"{_num(s['tasks'], 'summary.tasks')} tasks, {_num(s['rollouts'], 'summary.rollouts')} rollouts, "
                  f"{_num(s['scored'], 'summary.scored')} scored, {_num(s['infra_errors'], 'summary.infra_errors')} infrastructure errors")),
        ("public", rate_line("public")),
        ("hidden", rate_line("hidden")),
        ("gap (public - hidden)", _num(s["gap"], "summary.gap", "pct")),
    ]) + '<p class="note">A rollout passes a part when it passes every test of that part. Intervals: Wilson score, 95%.</p>', "rates"))
    fams = cast("list[dict[str, Any]]", m["families"])
    frows = "".join(
        f"<tr><td>{_e(f['family'])}</td><td class=r>{_num(f['rollouts'], f'families.{i}.rollouts')}</td>"
        f"<td class=r>{_num(f['public']['rate'], f'families.{i}.public.rate', 'pct')}</td>"
        f"<td class=r>{_num(f['public']['low'], f'families.{i}.public.low', 'pct')} to {_num(f['public']['high'], f'families.{i}.public.high', 'pct')}</td>"
        f"<td class=r>{_num(f['hidden']['rate'], f'families.{i}.hidden.rate', 'pct')}</td>"
        f"<td class=r>{_num(f['hidden']['low'], f'families.{i}.hidden.low', 'pct')} to {_num(f['hidden']['high'], f'families.{i}.hidden.high', 'pct')}</td>"
        f"<td class=r>{_num(f['gap'], f'families.{i}.gap', 'pct')}</td></tr>"
        for i, f in enumerate(fams)
    )
    figs: dict[str, Any] = {}
    traces: list[dict[str, Any]] = []
    for part in ("public", "hidden"):
        ys = [f[part]["rate"] for f in fams] + [rates[part]["rate"]]
        lows = [f[part]["low"] for f in fams] + [rates[part]["low"]]
        highs = [f[part]["high"] for f in fams] + [rates[part]["high"]]
        traces.append({
            "type": "bar", "name": part, "x": [f["family"] for f in fams] + ["all"],
            "y": [None if y is None else y * 100 for y in ys],
            "error_y": {"type": "data", "symmetric": False,
                        "array": [None if y is None or h is None else (h - y) * 100 for y, h in zip(ys, highs, strict=True)],
                        "arrayminus": [None if y is None or lo is None else (y - lo) * 100 for y, lo in zip(ys, lows, strict=True)]},
        })
    figs["chart-rates"] = {"data": traces, "layout": _layout("", "task family", "pass rate (%), 95% interval",
                                                              barmode="group", yaxis={"range": [0, 100], "title": {"text": "pass rate (%), 95% interval"}})}
    out.append(_section("Public-hidden gap per task family",
        f'<div class="chart" id="chart-rates"></div><table><thead><tr><th>family</th><th class=r>rollouts</th>'
        f"<th class=r>public</th><th class=r>95% interval</th><th class=r>hidden</th><th class=r>95% interval</th><th class=r>gap</th></tr></thead><tbody>{frows}</tbody></table>", "families"))
    codes: dict[str, str] = {}
    trs: list[str] = []
    for i, r in enumerate(cast("list[dict[str, Any]]", m["rollouts"])):
        p = f"rollouts.{i}"
        btn = ""
        if r.get("code") is not None:
            cid = f"r{i}"
            codes[cid] = r["code"]
            btn = f'<button class="code" data-code="{cid}" data-title="{_e(r["task_id"])} sample {r["sample"]}">code</button>'
        trs.append(
            f'<tr class="{_e(r["status"])}" data-status="{_e(r["status"])}" data-family="{_e(r["family"])}">'
            f"<td>{_e(r['task_id'])}</td><td>{_e(r['family'])}</td><td class=r data-v=\"{r['sample']}\">{_num(r['sample'], p + '.sample')}</td>"
            f"<td>{_e(r['status'])}</td>"
            f"<td class=r data-v=\"{_sortkey(r['public_passed'])}\">{_num(r['public_passed'], p + '.public_passed')}/{_num(r['public_total'], p + '.public_total')}</td>"
            f"<td class=r data-v=\"{_sortkey(r['hidden_passed'])}\">{_num(r['hidden_passed'], p + '.hidden_passed')}/{_num(r['hidden_total'], p + '.hidden_total')}</td>"
            f"<td>{_failing_html(r['failing'])}{_e(r['infra_error'] or '')}</td><td>{btn}</td></tr>"
        )
    table = (
        _filters("rollouts", [("status", "status", ["pass", "fail", "infra_error"]),
                              ("family", "family", [f["family"] for f in fams])])
        + '<table class="sortable" id="rollouts"><thead><tr><th data-sort>task</th><th data-sort>family</th>'
        "<th data-sort class=r>sample</th><th data-sort>status</th><th data-sort class=r>public</th>"
        "<th data-sort class=r>hidden</th><th>failing tests (reason)</th><th>code</th></tr></thead>"
        f"<tbody>{''.join(trs)}</tbody></table>"
    )
    out.append(_section("Per task", f'<p class="note">{_e(m["code_note"])}. Hidden tests show their reason only; '
                        "their expected values are never in a report.</p>" + table, "tasks"))
    dig = "".join(f"<tr><th>{_e(k)}</th><td class=digest>{_e(json.dumps(v, sort_keys=True))}</td></tr>"
                  for k, v in m["digests"].items())
    out.append(_section("Digests", f"<table>{dig}</table>"))
    return "".join(out), figs, codes


# ------------------------------------------------------------------------------------------------ campaign


def _campaign(m: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    out: list[str] = []
    models = cast("list[dict[str, Any]]", m["models"])
    mrows = "".join(
        f"<tr><td>{_e(x['model'])}</td><td class=r>{_num(x['pass@1'], f'models.{i}.pass@1', 'pct')}</td>"
        f"<td class=r>{_interval(x['pass@1_ci95'], f'models.{i}.pass@1_ci95')}</td>"
        f"<td class=r>{_num(x['public_pass@1'], f'models.{i}.public_pass@1', 'pct')}</td>"
        f"<td class=r>{_interval(x['public_pass@1_ci95'], f'models.{i}.public_pass@1_ci95')}</td>"
        f"<td class=r>{_num(x['pass@k'], f'models.{i}.pass@k', 'pct')} &plusmn; {_num(x['pass@k_se'], f'models.{i}.pass@k_se', 'pct')}</td>"
        f"<td class=r>{_num(x['solved_tasks'], f'models.{i}.solved_tasks')}</td>"
        f"<td class=r>{_num(x['cost_usd'], f'models.{i}.cost_usd', 'usd')}</td>"
        f"<td class=r>{_num(x['cost_per_solved_task_usd'], f'models.{i}.cost_per_solved_task_usd', 'usd')}</td>"
        f"<td class=r>{_num(x['infra_errors'], f'models.{i}.infra_errors')}</td></tr>"
        for i, x in enumerate(models)
    )
    out.append(_section("Models",
        f"<p>{_num(m['tasks'], 'tasks')} tasks, K = {_num(m['k'], 'k')}, spent {_num(m['cost_usd'], 'cost_usd', 'usd')}; "
        f"status {_e(m['source']['status'])}</p>"
        '<table class="sortable" id="models"><thead><tr><th data-sort>model</th><th data-sort class=r>pass@1 (hidden)</th>'
        "<th class=r>95% interval</th><th data-sort class=r>pass@1 (public)</th><th class=r>95% interval</th>"
        "<th data-sort class=r>pass@k &plusmn; SE</th><th data-sort class=r>tasks solved</th><th data-sort class=r>cost</th>"
        f"<th data-sort class=r>cost per solved task</th><th class=r>infra errors</th></tr></thead><tbody>{mrows}</tbody></table>"
        '<p class="note">pass@1: mean over tasks of the share of samples passing every hidden (public) test; pass@k: '
        "unbiased estimator at k = K, &plusmn; one standard error of the mean over tasks; solved: public and hidden "
        f"tests all pass in at least one sample. Intervals: {_e(m['intervals'])}.</p>", "models"))
    figs: dict[str, Any] = {}
    fr = m["frontier"]
    if fr["points"]:
        pts = cast("list[dict[str, Any]]", fr["points"])
        figs["chart-frontier"] = {
            "data": [
                {"type": "scatter", "mode": "lines+markers", "name": "routed (threshold)",
                 "x": [p["cost_usd"] for p in pts], "y": [p["pass_rate"] * 100 for p in pts],
                 "text": [f"threshold {p['threshold']}" for p in pts], "hovertemplate": "%{text}<br>$%{x:.6f}, %{y:.1f}%"},
                {"type": "scatter", "mode": "markers+text", "name": f"always {fr['always_cheap']['model']} (cheap)",
                 "x": [fr["always_cheap"]["cost_usd"]], "y": [fr["always_cheap"]["pass_rate"] * 100],
                 "text": ["always cheap"], "textposition": "top right", "marker": {"size": 12, "symbol": "square"}},
                {"type": "scatter", "mode": "markers+text", "name": f"always {fr['always_strong']['model']} (strong)",
                 "x": [fr["always_strong"]["cost_usd"]], "y": [fr["always_strong"]["pass_rate"] * 100],
                 "text": ["always strong"], "textposition": "bottom left", "marker": {"size": 12, "symbol": "diamond"}},
            ],
            "layout": _layout("", "cost (USD, evaluation tasks)", "hidden pass rate (%)"),
        }
        prow = "".join(
            f"<tr><td class=r>{_num(p['threshold'], f'frontier.points.{i}.threshold', 'float')}</td>"
            f"<td class=r>{_num(p['pass_rate'], f'frontier.points.{i}.pass_rate', 'pct')}</td>"
            f"<td class=r>{_interval(p['pass_rate_ci95'], f'frontier.points.{i}.pass_rate_ci95')}</td>"
            f"<td class=r>{_num(p['cost_usd'], f'frontier.points.{i}.cost_usd', 'usd')}</td>"
            f"<td class=r>{_num(p['escalations'], f'frontier.points.{i}.escalations')}</td></tr>"
            for i, p in enumerate(pts)
        )
        frontier = (
            f'<p class="note">{_e(fr["note"])}. Always cheap: {_e(fr["always_cheap"]["model"])} '
            f"{_num(fr['always_cheap']['pass_rate'], 'frontier.always_cheap.pass_rate', 'pct')} "
            f"({_interval(fr['always_cheap']['pass_rate_ci95'], 'frontier.always_cheap.pass_rate_ci95')}) at "
            f"{_num(fr['always_cheap']['cost_usd'], 'frontier.always_cheap.cost_usd', 'usd')}; always strong: "
            f"{_e(fr['always_strong']['model'])} {_num(fr['always_strong']['pass_rate'], 'frontier.always_strong.pass_rate', 'pct')}"
            f" ({_interval(fr['always_strong']['pass_rate_ci95'], 'frontier.always_strong.pass_rate_ci95')})"
            f" at {_num(fr['always_strong']['cost_usd'], 'frontier.always_strong.cost_usd', 'usd')}. "
            f"Intervals: {_e(fr['method'])}.</p>"
            '<div class="chart" id="chart-frontier"></div>'
            "<table><thead><tr><th class=r>threshold</th><th class=r>pass</th><th class=r>95% interval</th><th class=r>cost</th>"
            f"<th class=r>escalations</th></tr></thead><tbody>{prow}</tbody></table>"
        )
    else:
        frontier = f'<p class="note">{_e(fr["note"])}</p>'
    out.append(_section("Routing frontier: pass rate vs cost across thresholds", frontier, "frontier"))
    heat = m["heatmap"]
    figs["chart-heatmap"] = {
        "data": [{"type": "heatmap", "x": heat["tasks"], "y": heat["models"],
                  "z": [[None if v is None else v * 100 for v in row] for row in heat["solved"]],
                  "zmin": 0, "zmax": 100, "colorscale": [[0, "#b42318"], [0.5, "#f2c94c"], [1, "#1a7f37"]], "colorbar": {"title": {"text": "% solved"}},
                  "hovertemplate": "%{y}<br>%{x}<br>%{z:.0f}% of samples solved<extra></extra>"}],
        "layout": _layout("", "task", "", xaxis={"showticklabels": False, "title": {"text": "task (hover for its id)"}},
                          margin={"l": 90, "r": 20, "t": 20, "b": 40}),
    }
    out.append(_section("Per task: share of samples solved (models x tasks)",
                        '<div class="chart" id="chart-heatmap" style="height:260px"></div>', "heatmap"))
    hk = m["hacking"]
    by = "".join(f"<tr><td>{_e(k)}</td><td class=r>{_num(v, f'hacking.by_check.{k}')}</td></tr>" for k, v in hk["by_check"].items())
    out.append(_section("Reward-hacking flags",
        f"<p>{_num(hk['flagged'], 'hacking.flagged')} rollouts flagged. <span class=note>{_e(hk['note'])}</span></p>"
        + (f"<table><thead><tr><th>check</th><th class=r>rollouts</th></tr></thead><tbody>{by}</tbody></table>" if by else ""),
        "hacking"))
    codes: dict[str, str] = {}
    trs: list[str] = []
    for i, r in enumerate(cast("list[dict[str, Any]]", m["rollouts"])):
        p = f"rollouts.{i}"
        btn = ""
        if r.get("code") is not None:
            cid = f"r{i}"
            codes[cid] = r["code"]
            btn = f'<button class="code" data-code="{cid}" data-title="{_e(r["model"])} {_e(r["task_id"])} sample {r["sample"]}">code</button>'
        flags = ", ".join(r["flags"])
        trs.append(
            f'<tr class="{_e(r["status"])}" data-status="{_e(r["status"])}" data-model="{_e(r["model"])}">'
            f"<td>{_e(r['model'])}</td><td>{_e(r['task_id'])}</td><td class=r data-v=\"{r['sample']}\">{_num(r['sample'], p + '.sample')}</td>"
            f"<td>{_e(r['status'])}</td>"
            f"<td class=r data-v=\"{_sortkey(r['public_passed'])}\">{_num(r['public_passed'], p + '.public_passed')}/{_num(r['public_total'], p + '.public_total')}</td>"
            f"<td class=r data-v=\"{_sortkey(r['hidden_passed'])}\">{_num(r['hidden_passed'], p + '.hidden_passed')}/{_num(r['hidden_total'], p + '.hidden_total')}</td>"
            f"<td class=r data-v=\"{_sortkey(r['cost_usd'])}\">{_num(r['cost_usd'], p + '.cost_usd', 'usd')}</td>"
            f"<td class=bad>{_e(flags)}</td><td>{_failing_html(r['failing'])}</td><td>{btn}</td></tr>"
        )
    table = (
        _filters("rollouts", [("status", "status", ["pass", "fail", "infra_error"]),
                              ("model", "model", [x["model"] for x in models])])
        + '<table class="sortable" id="rollouts"><thead><tr><th data-sort>model</th><th data-sort>task</th>'
        "<th data-sort class=r>sample</th><th data-sort>status</th><th data-sort class=r>public</th>"
        "<th data-sort class=r>hidden</th><th data-sort class=r>cost</th><th data-sort>flags</th>"
        f"<th>failing tests (reason)</th><th>code</th></tr></thead><tbody>{''.join(trs)}</tbody></table>"
    )
    out.append(_section("Rollouts", '<p class="note">Hidden tests show their reason only; their expected values '
                        "are never in a report.</p>" + table, "tasks"))
    dig = "".join(f"<tr><th>{_e(k)}</th><td class=digest>{_e(v)}</td></tr>" for k, v in m["digests"].items())
    out.append(_section("Digests", f"<table>{dig}</table>"))
    return "".join(out), figs, codes
