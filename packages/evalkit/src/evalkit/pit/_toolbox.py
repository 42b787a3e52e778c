"""The agent's tools, bound to one (arm, clock, session): they answer only with what was knowable at its bell.

A :class:`CellView` holds one arm's rows in the order the cell's clock makes them visible (entry session, then
``known_at``, then ``row_key``), so the rows visible at session S are a prefix found by binary search and every
``pit_list`` call costs O(log n + limit), not a scan. Lists are newest first.

Every answer carries ``known_at`` (the bell the answer is as of), ``clock``, ``arm`` and ``session_date``; every
row carries its own ``known_at`` and ``entry_session``. In the shifted arm every date and instant the agent sees
is moved onto the NYSE calendar ten years on (the release's shift map): sessions onto real sessions, a row's
``known_at`` recomputed by its clock from the shifted fields (so it reads like any other row's) unless that
would contradict its entry session, where the shifted instant of its real ``known_at`` is shown instead. Reading a row that is not yet knowable returns ``not_yet_knowable`` and the key only,
and so does reading a row that does not exist: the two answers are identical, so neither reveals that a future
filing exists. The tools never decide what is traded: the runner accepts or refuses picks from its own table.

Every call goes through :meth:`Toolbox.call`, which is total: its arguments are admitted to the form the trajectory
records (:mod:`evalkit.pit._toolargs`), the answer is computed from that form only, and whatever goes wrong is the
call's recorded ``error`` answer (docs/pit-harness.md, "Bounds").
"""

from __future__ import annotations

import bisect
import datetime as dt
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from evalkit.pit._bounds import harness_failure
from evalkit.pit._entries import side_of
from evalkit.pit._tool_specs import MAX_LIMIT, TOOL_NAMES, tool_specs
from evalkit.pit._toolargs import admit, int_arg
from evalkit_core import Calendar, Clock, Release, ShiftMap, canonical_string, format_instant, with_entry
from evalkit_core.models import Completion, Request

if TYPE_CHECKING:
    from evalkit.pit._serving import ServedMask

__all__ = ["TOOL_NAMES", "ArmRows", "CellView", "Toolbox", "Unrendered", "cell_views", "clock_order", "tool_specs"]

_DISPLAY_ORDER = (
    "row_key", "form", "title", "issuer", "cik", "partition_date", "published_at", "acceptance_at",
    "disseminated_at", "accession", "url",
)


_BLOCK = 2048  # rows rendered together
_TEXT_BLOCK = 16384  # rows encoded together (polars' cost per call is paid once per block)
_BLOCKS_KEPT = 64  # blocks kept of each kind, the most recently used (131,072 rows of each): see ArmRows
_REDRAWS = 4  # an arm's three cells sweep it three times; more drops than this many sweeps: the arm keeps all
_TEXT_BLOCKS_KEPT = 8
_ARM_POS = "_arm_position"  # a row's position in its arm frame, carried through a cell's ordering


def _as_text(name: str, dtype: pl.DataType, alias: str) -> pl.Expr:
    """Instants as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC (whole seconds), dates as ``YYYY-MM-DD``; other columns as they
    are."""
    col = pl.col(name)
    if isinstance(dtype, pl.Datetime):
        if dtype.time_zone is None:
            col = col.dt.replace_time_zone("UTC")
        return col.dt.convert_time_zone("UTC").dt.strftime("%Y-%m-%dT%H:%M:%SZ").alias(alias)
    if dtype == pl.Date:
        return col.dt.strftime("%Y-%m-%d").alias(alias)
    return col.alias(alias)


_ENTRY_FIELDS = ("row_key", "partition_date", "published_at", "acceptance_at", "disseminated_at")


def clock_order(main_frame: pl.DataFrame, clock: Clock, calendar: Calendar) -> pl.DataFrame:
    """The main arm's row keys in the order ``clock`` makes them visible (entry session, then ``known_at``, then
    ``row_key``), with their entry: every arm's cell under ``clock`` uses this order (control arms use the main arm's
    clocks)."""
    entries = with_entry(main_frame.select(_ENTRY_FIELDS), clock, calendar)
    return entries.select("row_key", "known_at", "known_at_fallback", "entry_index", "entry_date").sort(
        ["entry_index", "known_at", "row_key"]
    )


def cell_views(
    release: Release,
    arms: Sequence[str],
    clocks: Sequence[str],
    calendar: Calendar,
    served: ServedMask | None = None,
) -> Iterator[CellView]:
    """The cells of a run in its order (arm by arm, each clock within), made lazily: an arm's rows are formatted
    once for its cells and dropped after them, and each clock's order of the rows (and the lookups built on it) is
    computed once for all arms. With ``served`` (:func:`evalkit.pit._serving.serve_mask`), the shifted cells serve
    its rows (decoys and drawn times of day) over its extended shift, in the order of the instants shown.
    The run and verify's replay both walk the cells through this, so they see the same views."""
    main = release.arm("main")
    orders: dict[tuple[str, Clock], pl.DataFrame] = {}
    first: dict[Clock, _Lookups] = {}
    for n, arm in enumerate(arms):
        decoyed = side_of(served, arm) != ""
        frame, main_frame = served.frames(arm) if served is not None and decoyed else (release.arm(arm), main)
        shift = served.shift if served is not None and arm == "shifted" else release.shift
        rows = ArmRows(frame)
        for name in clocks:
            clock = Clock(name)
            order = orders.get((side_of(served, arm), clock))
            if order is None:
                order = orders[side_of(served, arm), clock] = clock_order(main_frame, clock, calendar)
            like = first.get(clock)
            view = CellView(
                arm, clock, frame, main_frame, calendar, shift, rows, order, like=like, by_shown=decoyed
            )
            first.setdefault(clock, view.lookups)
            yield view
            del view  # this generator holds no view while it builds the next
        # what no later arm shares is dropped (a run's memory is one arm's, not the run's)
        later = {side_of(served, a) for a in arms[n + 1 :]}
        for k in [k for k in orders if k[0] not in later]:
            del orders[k]
        if "" not in later:
            first.clear()
        del rows


class ArmRows:
    """One arm's rows as the agent sees them, less the two fields a clock decides (``known_at`` and
    ``entry_session``): nulls dropped, dates ISO, instants ``...Z``. The cells of one arm share one, so a row's text
    is formatted once per arm instead of once per cell.

    Rows are rendered a block at a time (in the arm frame's order) with polars' vectorised formatting (the same text
    as :func:`evalkit_core.format_instant` and ``date.isoformat``), and the blocks used last are kept
    (:data:`_BLOCKS_KEPT`, :data:`_TEXT_BLOCKS_KEPT`): a session's rows are near each other in the arm's order, so
    a block is rendered about once per cell and memory stays bounded; an agent asking all over the arm cannot make
    blocks render again and again: once an arm has dropped _REDRAWS times its blocks, it keeps every block.

    Each row is also kept as canonical JSON text, in three pieces around the two members a cell adds (the keys
    sort as ``... disseminated_at, entry_session, form, issuer, known_at, partition_date ...``): a served row's line
    in the trajectory is then joined from text encoded once per arm, not encoded again for every answer."""

    def __init__(self, arm_frame: pl.DataFrame) -> None:
        self.frame = arm_frame
        self._blocks: OrderedDict[int, list[dict[str, Any]]] = OrderedDict()
        self._texts: OrderedDict[int, tuple[list[str], list[str], list[str]]] = OrderedDict()
        self._plain: dict[str, bool] | None = None
        self._dropped = [0, 0]  # blocks of text, of rendered rows, dropped so far

    def row(self, position: int) -> dict[str, Any]:
        """The rendered row at ``position`` of the arm frame (shared: callers copy before they change it)."""
        block, j = divmod(position, _BLOCK)
        rows = self._blocks.get(block)
        if rows is None:
            rows = self._render_block(block)
        else:
            self._blocks.move_to_end(block)
        return rows[j]

    def text(self, position: int) -> tuple[str, str, str]:
        """The row at ``position`` as canonical JSON in three pieces: the row (with a cell's ``entry_session`` and
        ``known_at`` members, each given as ``"name":value``) is ``a + entry_session + b + "," + known_at + c``."""
        block, j = divmod(position, _TEXT_BLOCK)
        texts = self._texts.get(block)
        if texts is None:
            texts = self._texts[block] = self._text_block(block)
            self._bound(self._texts, _TEXT_BLOCKS_KEPT, 0, _TEXT_BLOCK)
        else:
            self._texts.move_to_end(block)
        return texts[0][j], texts[1][j], texts[2][j]

    def _text_block(self, block: int) -> tuple[list[str], list[str], list[str]]:
        if self._plain is None:  # which columns need no escaping anywhere in the arm (checked once, whole columns)
            self._plain = {
                key: dtype != pl.String or not self.frame.get_column(key).str.contains(_NEEDS_ESCAPE).any()
                for key, dtype in self.frame.schema.items()
            }
        part = self.frame.slice(block * _TEXT_BLOCK, _TEXT_BLOCK)
        schema = part.schema
        names = [key for key in _DISPLAY_ORDER if key in schema]
        return _row_texts(part.select([_as_text(key, schema[key], key) for key in names]), names, self._plain)

    def _render_block(self, block: int) -> list[dict[str, Any]]:
        part = self.frame.slice(block * _BLOCK, _BLOCK)
        schema = part.schema
        names = [key for key in _DISPLAY_ORDER if key in schema]
        texts = part.select([_as_text(key, schema[key], key) for key in names])
        # the columns with a null in this block: a row drops its nulls
        nullable = [(i, key) for i, key in enumerate(names) if texts.get_column(key).null_count()]
        values_by_row = texts.rows()
        if not nullable:
            rows = [dict(zip(names, values, strict=True)) for values in values_by_row]
        else:
            rows = []
            for values in values_by_row:
                out = dict(zip(names, values, strict=True))
                for i, key in nullable:
                    if values[i] is None:
                        del out[key]
                rows.append(out)
        self._blocks[block] = rows
        self._bound(self._blocks, _BLOCKS_KEPT, 1, _BLOCK)
        return rows

    def _bound(self, kept: OrderedDict[int, Any], most: int, kind: int, size: int) -> None:  # see the docstring
        if len(kept) > most and self._dropped[kind] < _REDRAWS * -(-self.frame.height // size):
            kept.popitem(last=False)
            self._dropped[kind] += 1


# What canonical JSON escapes inside a string (the standard library's encoder with ensure_ascii off, which
# canonical_bytes uses): the quote, the backslash and the control characters. A column with none of these is
# written as it is, between quotes, by polars; a column with any is escaped value by value.
_NEEDS_ESCAPE = r'["\\\x00-\x1F]'


def _row_texts(
    texts: pl.DataFrame, names: Sequence[str], plain: Mapping[str, bool]
) -> tuple[list[str], list[str], list[str]]:
    """Each row's canonical JSON in the three pieces :meth:`ArmRows.text` describes (null members left out), made
    by polars a column at a time; ``plain`` says which columns hold nothing that needs escaping."""

    def member(key: str) -> pl.Expr:
        if plain.get(key, False):
            return pl.concat_str([pl.lit(f'"{key}":"'), pl.col(key), pl.lit('"')])
        escaped = [None if v is None else f'"{key}":{canonical_string(v)}' for v in texts.get_column(key).to_list()]
        return pl.lit(pl.Series(key, escaped, dtype=pl.String))

    def group(keys: Sequence[str]) -> pl.Expr:
        if not keys:
            return pl.lit("")
        return pl.concat_str([member(k) for k in sorted(keys)], separator=",", ignore_nulls=True)

    head = group([k for k in names if k < "entry_session"])
    mid = group([k for k in names if "entry_session" < k < "known_at"])
    tail = group([k for k in names if k > "known_at"])
    pieces = texts.select(
        pl.when(head == "").then(pl.lit("{")).otherwise(pl.concat_str([pl.lit("{"), head, pl.lit(",")])).alias("a"),
        pl.when(mid == "").then(pl.lit("")).otherwise(pl.concat_str([pl.lit(","), mid])).alias("b"),
        pl.when(tail == "").then(pl.lit("}")).otherwise(pl.concat_str([pl.lit(","), tail, pl.lit("}")])).alias("c"),
    )
    return (
        pieces.get_column("a").to_list(),
        pieces.get_column("b").to_list(),
        pieces.get_column("c").to_list(),
    )


class _Lookups:
    """A cell's rows in its clock's order, as lookups: row_keys, forms, entry session indices, each key's position,
    and each form's positions and their entry sessions. The same for every arm under one clock. The numbers are
    kept as arrays of machine integers (not lists of Python ints), the forms as a polars column."""

    def __init__(self, row_keys: list[str], forms: pl.Series, entry_index: pl.Series) -> None:
        self.row_keys = row_keys
        self.forms = forms
        self.entry_index = array("i", entry_index.to_list())
        self.position: dict[str, int] = {k: i for i, k in enumerate(row_keys)}
        groups = (
            pl.DataFrame({"form": forms, "entry": entry_index})
            .with_row_index("i")
            .group_by("form", maintain_order=True)
            .agg(pl.col("i"), pl.col("entry"))
        )
        self.by_form: dict[str, array[int]] = {}
        self.by_form_entry: dict[str, array[int]] = {}
        for form, idx, entries in groups.iter_rows():
            self.by_form[form] = array("i", idx)
            self.by_form_entry[form] = array("i", entries)


class CellView:
    """One arm's rows ordered by the entry sessions of one clock (the main arm's clock, joined on row_key)."""

    def __init__(
        self,
        arm: str,
        clock: Clock,
        arm_frame: pl.DataFrame,
        main_frame: pl.DataFrame,
        calendar: Calendar,
        shift: ShiftMap | None = None,
        rows: ArmRows | None = None,
        order: pl.DataFrame | None = None,
        like: _Lookups | None = None,
        *,
        by_shown: bool = False,
    ) -> None:
        """``rows``: the arm's rendered rows, shared with the arm's other cells; it must wrap ``arm_frame`` itself.
        ``order``: :func:`clock_order` of ``main_frame`` under ``clock``, shared with the clock's other cells.
        ``like``: the ``lookups`` of another arm's view under the same clock, shared when this view's rows come out
        in the same order with the same forms. ``by_shown`` (a shifted arm whose times of day were drawn): rows
        within a session in the order of the ``known_at`` shown, not the real one (which the order would reveal)."""
        if arm == "shifted" and shift is None:
            raise ValueError("the shifted arm needs the release's shift map")
        if rows is not None and rows.frame is not arm_frame:
            raise ValueError("rows must render this arm's frame")
        self.arm = arm
        self.clock = clock
        self.calendar = calendar
        self.shift = shift if arm == "shifted" else None
        if order is None:
            order = clock_order(main_frame, clock, calendar)
        ordered = order.join(arm_frame.with_row_index(_ARM_POS), on="row_key", how="inner", maintain_order="left")
        if self.shift is not None:
            ordered = self._with_shifted_known_at(ordered, arm_frame.select(_ENTRY_FIELDS), clock, calendar, self.shift)
        elif by_shown:  # a redacted arm whose instants were drawn: the known_at its shown fields give
            ordered = self._with_shown_known_at(ordered, arm_frame.select(_ENTRY_FIELDS), clock, calendar)
        if by_shown:
            ordered = ordered.sort(["entry_index", "shown_known_at", "row_key"], maintain_order=True)
        self._shown = self.shift is not None or by_shown
        self.frame = ordered
        self.rows = rows if rows is not None else ArmRows(arm_frame)
        self._arm_pos: list[int] = ordered.get_column(_ARM_POS).to_list()
        self.row_keys: list[str] = ordered.get_column("row_key").to_list()
        forms = ordered.get_column("form")
        if like is not None and like.row_keys == self.row_keys and like.forms.equals(forms):
            # the same rows in the same order (every arm of a release has the same row_keys and forms): the same
            # lookups, built once per clock instead of once per cell
            self.lookups = like
            self.row_keys = like.row_keys
        else:
            self.lookups = _Lookups(self.row_keys, forms, ordered.get_column("entry_index"))
        self.entry_index = self.lookups.entry_index
        self.position = self.lookups.position
        self.by_form = self.lookups.by_form
        self.by_form_entry = self.lookups.by_form_entry
        self.fallback_rows = int(ordered.get_column("known_at_fallback").sum())
        self._haystack: pl.Series | None = None
        self._known: dict[int, list[str | None]] = {}
        self._known_json: dict[int, list[str]] = {}
        self._entry_texts: dict[int, str] = {}
        self._entry_json: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.row_keys)

    @staticmethod
    def _with_shifted_known_at(
        ordered: pl.DataFrame, shifted: pl.DataFrame, clock: Clock, calendar: Calendar, shift: ShiftMap
    ) -> pl.DataFrame:
        """Add ``shown_known_at``: the clock's rule on the shifted fields, where it enters at the image of the
        row's real entry session; else (a real date on a closed day squeezed out of the shifted calendar) the
        shifted instant of the real ``known_at``, which always does."""
        rule = with_entry(shifted, clock, calendar).select(
            "row_key", pl.col("known_at").alias("shown_known_at"), pl.col("entry_date").alias("shown_entry")
        )
        table = pl.DataFrame(
            {"entry_date": [r for r, _ in shift.pairs], "image_entry": [s for _, s in shift.pairs]},
            schema={"entry_date": pl.Date, "image_entry": pl.Date},
        )
        out = ordered.join(rule, on="row_key", how="left", maintain_order="left").join(
            table, on="entry_date", how="left", maintain_order="left"
        )
        off = out.with_row_index("_i").filter(pl.col("image_entry").is_null() | (pl.col("image_entry") != pl.col("shown_entry")))
        if off.height:
            shown: list[dt.datetime] = out.get_column("shown_known_at").to_list()
            for i, known in zip(off.get_column("_i").to_list(), off.get_column("known_at").to_list(), strict=True):
                shown[i] = shift.instant(known)
            out = out.with_columns(pl.Series("shown_known_at", shown, dtype=pl.Datetime("us", "UTC")))
        return out.drop("shown_entry", "image_entry")

    @staticmethod
    def _with_shown_known_at(ordered: pl.DataFrame, shown: pl.DataFrame, clock: Clock, calendar: Calendar) -> pl.DataFrame:
        """Add ``shown_known_at``: the clock's rule on the shown (drawn) fields, where it enters at the row's real
        entry session (drawn instants keep their interval between bells, so always); else the real ``known_at``."""
        rule = with_entry(shown, clock, calendar).select(
            "row_key", pl.col("known_at").alias("shown_known_at"), pl.col("entry_index").alias("shown_index")
        )
        out = ordered.join(rule, on="row_key", how="left", maintain_order="left")
        same = pl.col("shown_index") == pl.col("entry_index")
        return out.with_columns(
            pl.when(same).then(pl.col("shown_known_at")).otherwise(pl.col("known_at")).alias("shown_known_at")
        ).drop("shown_index")

    def visible_count(self, session_index: int) -> int:
        """How many rows are visible at the session with this calendar index (a prefix of the order)."""
        return bisect.bisect_right(self.entry_index, session_index)

    def render(self, i: int) -> dict[str, Any]:
        """Row ``i`` as the agent sees it: the arm's rendered row (nulls dropped, dates ISO, instants ``...Z``) plus
        this cell's ``known_at`` and ``entry_session``; a new dict each call."""
        block, j = divmod(i, _BLOCK)
        known = self._known.get(block)
        if known is None:
            known = self._known_block(block)
        out = {**self.rows.row(self._arm_pos[i])}
        out["known_at"] = known[j]
        out["entry_session"] = self._entry_text(self.entry_index[i])
        return out

    def render_json(self, i: int) -> str:
        """Row ``i`` as canonical JSON text: ``canonical_bytes(self.render(i))``, joined from pieces kept per arm
        (the row) and per cell (its ``known_at`` and ``entry_session``)."""
        block, j = divmod(i, _BLOCK)
        known = self._known_json.get(block)
        if known is None:
            known = self._known_json[block] = [
                ',"known_at":' + (canonical_string(k) if k is not None else "null") for k in self._known_block(block)
            ]
        entry = self.entry_index[i]
        entry_json = self._entry_json.get(entry)
        if entry_json is None:
            entry_json = self._entry_json[entry] = '"entry_session":' + canonical_string(self._entry_text(entry))
        a, b, c = self.rows.text(self._arm_pos[i])
        return a + entry_json + b + known[j] + c

    def _known_block(self, block: int) -> list[str | None]:
        known = self._known.get(block)
        if known is None:
            name = "shown_known_at" if self._shown else "known_at"
            part = self.frame.slice(block * _BLOCK, _BLOCK)
            known = self._known[block] = part.select(_as_text(name, part.schema[name], "known_at")).to_series().to_list()
        return known

    def _entry_text(self, index: int) -> str:
        text = self._entry_texts.get(index)
        if text is None:
            day = self.calendar.all[index].date
            text = (self.shift.session_date(day) if self.shift is not None else day).isoformat()
            self._entry_texts[index] = text
        return text

    def haystack(self) -> pl.Series:
        if self._haystack is None:
            self._haystack = self.frame.select(
                pl.concat_str([pl.col("title").fill_null(""), pl.col("issuer").fill_null("")], separator=" ").str.to_lowercase()
            ).to_series()
        return self._haystack


class Unrendered(list[dict[str, Any]]):
    """An answer's rows as each row's ``row_key`` alone (``{"row_key": key}``): enough to count and key what was
    served; the rows themselves are the toolbox's :attr:`Toolbox.rows_json`."""


class Toolbox:
    """The tools bound to one session of one cell. Each call is recorded through ``record``.

    While ``record`` runs, :attr:`rows_json` is the canonical JSON text of the answer's ``rows`` (``pit_list``,
    ``pit_search``) or ``row`` (``pit_read``), joined from the view's pre-encoded rows, or None for an answer with
    neither: a recorder can write the answer's line without encoding its rows again.

    With ``render_rows`` False (the runner's and verify's toolboxes, whose answers travel and are checked as
    text), a ``pit_list`` or ``pit_search`` answer's ``rows`` is an :class:`Unrendered` list (each row as its
    ``row_key`` alone) and :attr:`unrendered` names that field: the rows exist only as :attr:`rows_json`, and
    whoever passes the answer on sends that text (the agent's process decodes it into the same rows). No row is
    built as a Python dict on the harness's side, which is most of a large run's time and memory."""

    def __init__(
        self,
        view: CellView,
        session_index: int,
        record: Callable[[str, dict[str, Any], dict[str, Any]], None],
        served: Callable[[Sequence[str]], None] | None = None,
        models: Callable[[str, Request], Completion] | None = None,
        *,
        render_rows: bool = True,
    ) -> None:
        self._view = view
        self._render_rows = render_rows
        self.unrendered: str | None = None
        self._index = session_index
        self._session = view.calendar.all[session_index]
        self._visible = view.visible_count(session_index)
        self._record = record
        self._served = served
        self._models = models
        self.rows_json: str | None = None
        self.arm = view.arm
        self.clock = str(view.clock)
        if view.shift is not None:
            self.session_date = view.shift.session_date(self._session.date).isoformat()
            self.known_at = format_instant(view.shift.instant(self._session.open))
        else:
            self.session_date = self._session.date.isoformat()
            self.known_at = format_instant(self._session.open)

    # -- envelope --------------------------------------------------------------------------------------------

    def _envelope(self, **payload: Any) -> dict[str, Any]:
        return {"arm": self.arm, "clock": self.clock, "session_date": self.session_date, "known_at": self.known_at, **payload}

    def _finish(
        self,
        tool: str,
        args: dict[str, Any],
        result: dict[str, Any],
        keys: Sequence[str] = (),
        rows_json: str | None = None,
    ) -> dict[str, Any]:
        self.rows_json = rows_json
        self.unrendered = "rows" if isinstance(result.get("rows"), Unrendered) else None
        self._record(tool, args, result)
        if keys and self._served is not None:
            self._served(keys)
        return result

    def _error(self, tool: str, args: dict[str, Any], message: str) -> dict[str, Any]:
        return self._finish(tool, args, self._envelope(status="error", error=message))

    # -- tools -----------------------------------------------------------------------------------------------

    def pit_list(self, limit: int = 20, offset: int = 0, form: str | None = None) -> dict[str, Any]:
        return self.call("pit_list", {"limit": limit, "offset": offset, "form": form})

    def pit_search(self, query: str, limit: int = 20) -> dict[str, Any]:
        return self.call("pit_search", {"query": query, "limit": limit})

    def pit_read(self, row_key: str) -> dict[str, Any]:
        return self.call("pit_read", {"row_key": row_key})

    def pit_coverage(self) -> dict[str, Any]:
        return self.call("pit_coverage", {})

    def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one tool call by name (every tool method and every adapter comes here) and record it.

        Total over its input: arguments are admitted first (:func:`evalkit.pit._toolargs.admit`: what is recorded,
        and the error for a call the protocol refuses), the answer is computed from the recorded arguments only,
        and an exception of the harness's own code on this input becomes this call's recorded error answer (its
        type and a bounded message), never an exception out of the toolbox."""
        try:
            admitted = admit(name, arguments)
        except Exception as exc:  # admit is total; a bug in it is still this call's answer
            return self._error("<unadmitted>", {}, "the harness failed on this call: " + harness_failure(exc))
        tool, args = admitted.tool, admitted.args
        if admitted.error is not None:
            return self._error(tool, args, admitted.error)
        try:
            result, keys, rows_json = self._answer(tool, args)
        except Exception as exc:  # recorded with its type and message: a harness bug shows
            return self._error(tool, args, "the harness failed on this call: " + harness_failure(exc))
        return self._finish(tool, args, result, keys, rows_json)

    def _answer(self, tool: str, args: Mapping[str, Any]) -> tuple[dict[str, Any], Sequence[str], str | None]:
        """The answer to an admitted call, its served row keys and its rows' canonical JSON."""
        if tool == "pit_list":
            return self._list(int_arg(args, "limit", 20, 1, MAX_LIMIT), int_arg(args, "offset", 0, 0, None), args["form"])
        if tool == "pit_search":
            return self._search(cast("str", args["query"]), int_arg(args, "limit", 20, 1, MAX_LIMIT))
        if tool == "pit_read":
            return self._read(args["row_key"])
        return self._coverage(), (), None

    def _list(self, lim: int, off: int, form: object) -> tuple[dict[str, Any], list[str], str]:
        view = self._view
        if form is None:
            total = self._visible
            positions = range(total - 1 - off, max(total - 1 - off - lim, -1), -1)
        else:
            idx = view.by_form.get(str(form), [])
            total = bisect.bisect_right(view.by_form_entry.get(str(form), []), self._index)
            positions = [idx[j] for j in range(total - 1 - off, max(total - 1 - off - lim, -1), -1)]
        keys = [view.row_keys[i] for i in positions]
        result = self._envelope(status="ok", total=total, offset=off, rows=self._rows(positions, keys))
        text = "[" + ",".join([view.render_json(i) for i in positions]) + "]"
        return result, keys, text

    def _search(self, query: str, lim: int) -> tuple[dict[str, Any], list[str], str]:
        hay = self._view.haystack().head(self._visible)
        # a literal substring (never a regex), at most QUERY_CHARS long: polars escapes it, and what it compiles
        # stays far below its size limit
        hits = hay.str.contains(query.strip().lower(), literal=True).arg_true().to_list()
        chosen: list[int] = hits[::-1][:lim]
        keys = [self._view.row_keys[i] for i in chosen]
        result = self._envelope(status="ok", query=query, total=len(hits), rows=self._rows(chosen, keys))
        text = "[" + ",".join([self._view.render_json(i) for i in chosen]) + "]"
        return result, keys, text

    def _rows(self, positions: Sequence[int], keys: Sequence[str]) -> list[dict[str, Any]]:
        """An answer's rows: rendered, or (``render_rows`` False) :class:`Unrendered`."""
        if self._render_rows:
            return [self._view.render(i) for i in positions]
        return Unrendered({"row_key": k} for k in keys)

    def _read(self, row_key: object) -> tuple[dict[str, Any], list[str], str | None]:
        i = self._view.position.get(row_key) if isinstance(row_key, str) else None
        if i is None or self._view.entry_index[i] > self._index:
            # One answer for a row that does not exist and a row not yet knowable: telling them apart would
            # tell the agent that a future filing exists.
            return self._envelope(status="not_yet_knowable", row_key=row_key), [], None
        row = self._view.render(i)
        return self._envelope(status="ok", row=row), [cast("str", row_key)], self._view.render_json(i)

    def _coverage(self) -> dict[str, Any]:
        visible = self._view.frame.head(self._visible)
        by_form = {str(f): int(n) for f, n in visible.group_by("form").len().sort("form").iter_rows()}
        by_date_frame = visible.group_by("partition_date").len().sort("partition_date")
        by_date = {d.isoformat(): int(n) for d, n in by_date_frame.iter_rows()}
        with_acceptance = int(visible.get_column("acceptance_at").is_not_null().sum())
        return self._envelope(
            status="ok",
            rows=self._visible,
            by_form=by_form,
            by_date=by_date,
            acceptance_coverage={"with_acceptance_at": with_acceptance, "without": self._visible - with_acceptance},
        )

    def complete(self, model_id: str, request: Request) -> Completion:
        """Call a model through the harness's gateway (the only way out of a guarded run); recorded as an event."""
        if self._models is None:
            raise RuntimeError("no model gateway is attached to this toolbox")
        return self._models(model_id, request)
