"""The index of ``evalkit view``: one row per run, sortable by any column, refreshed while a run is in progress.

The page is rendered whole by the server; its script sorts the table (click a heading; again to reverse) and polls
``/index.json`` (the same rows as JSON, read-only) every two seconds while a row is in progress, every ten
otherwise, rebuilding the rows with DOM text nodes (never markup from the data). Its Content-Security-Policy
allows its own inline script and style and a connection to its own origin only: nothing else loads.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit_cli._view_index import Item

__all__ = ["INDEX_CSP", "index_json", "index_page"]

INDEX_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
COLUMNS = ("kind", "run", "model / agent", "score", "date", "status", "detail")

_STYLE = """
td.status-valid{color:#116329}td.status-invalid{color:#b42318;font-weight:600}
td.status-in-progress{color:#9a6700;font-weight:600}td.status-interrupted{color:#9a6700}
#items th{cursor:pointer;user-select:none}#items th:after{content:" \\2195";color:#9aa3ad}
#items th[data-dir=asc]:after{content:" \\2191"}#items th[data-dir=desc]:after{content:" \\2193"}
#live{color:#56606b;font-size:12px;margin-left:10px}
"""

_SCRIPT = r"""
(function(){
  var table=document.getElementById('items');if(!table){return;}
  var sortCol=-1,asc=true;
  function val(td){var v=td.getAttribute('data-v');return v===null?td.textContent.trim():v;}
  function sort(){
    if(sortCol<0){return;}
    var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
    rows.sort(function(a,b){var x=val(a.cells[sortCol]),y=val(b.cells[sortCol]);var nx=parseFloat(x),ny=parseFloat(y);
      var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:(x<y?-1:x>y?1:0);return asc?c:-c;});
    rows.forEach(function(r){body.appendChild(r);});
  }
  var heads=table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads,function(th,i){th.addEventListener('click',function(){
    asc=sortCol===i?!asc:true;sortCol=i;
    Array.prototype.forEach.call(heads,function(h){h.removeAttribute('data-dir');});
    th.setAttribute('data-dir',asc?'asc':'desc');sort();});});
  function cell(tr,text,v,cls){var td=document.createElement('td');td.textContent=text;
    if(v!==undefined&&v!==null){td.setAttribute('data-v',v);}if(cls){td.className=cls;}tr.appendChild(td);return td;}
  function link(td,href,text){var a=document.createElement('a');a.href=href;a.textContent=text;td.appendChild(a);}
  function render(items){
    var fresh=document.createElement('tbody');
    items.forEach(function(it){
      var tr=document.createElement('tr');tr.setAttribute('data-kind',it.kind);tr.setAttribute('data-status',it.status);
      cell(tr,it.kind==='journal'?'eval':it.kind);var td=cell(tr,'');link(td,'/item/'+it.n,it.label);
      if(it.kind==='pit'){td.appendChild(document.createTextNode(' \u00b7 '));link(td,'/item/'+it.n+'/trajectory','trajectory');}
      cell(tr,it.model);cell(tr,it.score_text,it.score,'r');cell(tr,it.date);
      cell(tr,it.status,null,'status-'+it.status.replace(/ /g,'-'));cell(tr,it.detail);fresh.appendChild(tr);
    });
    table.replaceChild(fresh,table.tBodies[0]);sort();
    document.getElementById('count').textContent=items.length+' run(s)';
  }
  function poll(){
    fetch('/index.json',{cache:'no-store'}).then(function(r){return r.json();}).then(function(d){
      render(d.items);table.setAttribute('data-live',d.in_progress?'1':'0');
      document.getElementById('live').textContent=d.in_progress?'refreshing every 2 s while a run is in progress':'';
      setTimeout(poll,d.in_progress?2000:10000);
    }).catch(function(){setTimeout(poll,10000);});
  }
  setTimeout(poll,table.getAttribute('data-live')==='1'?2000:10000);
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _score_text(item: Item) -> str:
    if item.score is None:
        return "n/a"
    return f"{item.score * 100:+.3f}%" if item.score_fmt == "ret" else f"{item.score * 100:.1f}%"


def index_json(rows: list[tuple[int, Item]]) -> dict[str, Any]:
    items = [
        {"n": n, "kind": i.kind, "label": i.label, "model": i.model, "score": i.score, "score_fmt": i.score_fmt,
         "score_text": _score_text(i), "score_of": i.score_of, "date": i.date, "status": i.status, "detail": i.detail}
        for n, i in rows
    ]  # fmt: skip
    return {"items": items, "in_progress": any(i.status == "in progress" for _, i in rows)}


def _row(position: int, n: int, item: Item) -> str:
    extra = f' &middot; <a href="/item/{n}/trajectory">trajectory</a>' if item.kind == "pit" else ""
    score = (f'<span data-path="items.{position}.score" data-fmt="{item.score_fmt}">{_e(_score_text(item))}</span>'
             if item.score is not None else "n/a")  # fmt: skip
    v = "" if item.score is None else f' data-v="{item.score!r}"'
    status = item.status.replace(" ", "-")
    kind = "eval" if item.kind == "journal" else item.kind  # an eval still grading is an eval
    return (f'<tr data-kind="{_e(item.kind)}" data-status="{_e(item.status)}"><td>{_e(kind)}</td>'
            f'<td><a href="/item/{n}">{_e(item.label)}</a>{extra}</td><td>{_e(item.model)}</td>'
            f'<td class="r"{v} title="{_e(item.score_of)}">{score}</td><td>{_e(item.date)}</td>'
            f'<td class="status-{_e(status)}">{_e(item.status)}</td><td>{_e(item.detail)}</td></tr>')  # fmt: skip


def index_page(rows: list[tuple[int, Item]], roots: list[str]) -> str:
    from evalkit_cli._report_html import STYLE

    live = any(i.status == "in progress" for _, i in rows)
    heads = "".join(f"<th>{_e(c)}</th>" for c in COLUMNS)
    table = (f'<table id="items" data-live="{int(live)}"><thead><tr>{heads}</tr></thead><tbody>'
             + "".join(_row(p, n, i) for p, (n, i) in enumerate(rows)) + "</tbody></table>")  # fmt: skip
    body = (
        f'<p class="note">Runs, evals and campaigns under {_e(" and ".join(roots))}; read-only. '
        f'<span id="count"></span><span id="live">'
        f"{'refreshing every 2 s while a run is in progress' if live else ''}</span></p>"
        + (table if rows else "<p>Nothing found yet: no PIT receipt, eval or campaign.</p>" + table)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{INDEX_CSP}"><title>evalkit view</title>'
        f"<style>{STYLE}{_STYLE}</style></head><body><header><h1>evalkit view</h1></header>"
        f"<main><section>{body}</section></main><script>{_SCRIPT}</script></body></html>\n"
    )
