"""The harness's own tables of the release: the answer key by row key, and the entry tables: for each row, the calendar index of the session at whose bell a clock makes it
knowable. The runner decides picks with them (never with anything the agent was handed) and verify's replay
checks those decisions with the same tables.

A run asks for one table per clock over the same rows, so the tables share one index of the row keys and each
holds its clock's entries as a compact array: three clocks cost one dictionary of keys, not three.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit_core import Calendar, Clock, Release, with_entry

if TYPE_CHECKING:
    from evalkit.pit._serving import ServedMask

__all__ = ["AnswerKey", "EntryTable", "EntryTables", "entries_of", "entry_table", "key_index", "side_of"]

_ENTRY_FIELDS = ("row_key", "partition_date", "published_at", "acceptance_at", "disseminated_at")


class EntryTable(Mapping[str, int]):
    """row_key -> entry session index under one clock (read-only)."""

    __slots__ = ("_entries", "_index")

    def __init__(self, index: Mapping[str, int], entries: Sequence[int]) -> None:
        if len(entries) != len(index):
            raise ValueError("an entry table needs one entry per key of its index")
        self._index = index
        self._entries = array("i", entries)

    def __getitem__(self, key: str) -> int:
        return self._entries[self._index[key]]

    def get(self, key: object, default: int | None = None) -> int | None:  # type: ignore[override]
        i = self._index.get(key) if isinstance(key, str) else None  # type: ignore[call-overload]
        return default if i is None else self._entries[i]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def key_index(main: pl.DataFrame) -> dict[str, int]:
    """row_key -> its position in ``main`` (the index every clock's :class:`EntryTable` of ``main`` shares)."""
    return {k: i for i, k in enumerate(main.get_column("row_key").to_list())}


def entries_of(
    main: pl.DataFrame, clock: Clock, calendar: Calendar, index: Mapping[str, int] | None = None
) -> EntryTable:
    """The entry table of main-side rows (a served shifted arm's include its decoys') under ``clock``; ``index``:
    :func:`key_index` of ``main``, when the caller keeps one for its other clocks."""
    table = with_entry(main.select(_ENTRY_FIELDS), clock, calendar)  # keeps the rows' order
    return EntryTable(index if index is not None else key_index(main), table.get_column("entry_index").to_list())


def entry_table(
    release: Release, clock: Clock, calendar: Calendar, index: Mapping[str, int] | None = None
) -> EntryTable:
    """The entry table of the release's main arm under ``clock``: what the harness decides picks with (the runner,
    before any agent is called; verify, from the release it reads)."""
    return entries_of(release.arm("main"), clock, calendar, index)


def side_of(served: ServedMask | None, arm: str) -> str:
    """Whose rows an arm's cells are served and decided from: a served arm's own (its name), or ``""``, the
    release's main arm (the arms a mask does not serve)."""
    return arm if served is not None and served.serves(arm) else ""


class EntryTables:
    """A run's entry tables by (side, clock) (:func:`side_of`): the release's main arm, or a served arm's main-side
    rows (its decoys' or clones' included). Each is made from the harness's own frames when a cell first asks for
    it, and :meth:`keep` forgets the sides no later cell uses. The runner, the one-worker replay and verify's
    workers all decide with these."""

    def __init__(self, release: Release, calendar: Calendar, served: ServedMask | None = None) -> None:
        self.release, self.calendar, self.served = release, calendar, served
        self._tables: dict[tuple[str, Clock], EntryTable] = {}
        self._indexes: dict[str, dict[str, int]] = {}  # one index of the keys for each side's clocks

    def of(self, arm: str, clock: Clock) -> EntryTable:
        side = side_of(self.served, arm)
        table = self._tables.get((side, clock))
        if table is None:
            main = self.served.frames(arm)[1] if self.served is not None and side else self.release.arm("main")
            if side not in self._indexes:
                self._indexes[side] = key_index(main)
            table = self._tables[side, clock] = entries_of(main, clock, self.calendar, self._indexes[side])
        return table

    def keep(self, arms: Iterable[str]) -> None:
        """Forget every table (and key index) no cell of ``arms`` uses."""
        sides = {side_of(self.served, a) for a in arms}
        self._tables = {k: t for k, t in self._tables.items() if k[0] in sides}
        self._indexes = {k: i for k, i in self._indexes.items() if k in sides}


class AnswerKey(Mapping[str, Mapping[str, Any]]):
    """The answer key by row_key, read from its frame only where it is asked: a row is made into a dict when it is
    looked up (the probe's few items), while what scoring reads of every trade (:meth:`facts`) and the tickers
    (:meth:`tickers`) come from whole columns. A run's answer key has a row for every filing of the window; dicts
    for all of them cost seconds and hundreds of MB."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame
        self._index = {k: i for i, k in enumerate(frame.get_column("row_key").to_list())}
        self._rows: dict[str, dict[str, Any]] = {}

    def __getitem__(self, key: str) -> Mapping[str, Any]:
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self._frame.row(self._index[key], named=True)
        return row

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def facts(self) -> dict[str, tuple[str, int | None, str | None]]:
        """row_key -> (form, ``acceptance_at`` in microseconds since the epoch or None, ticker or None)."""
        frame = self._frame
        accepted = frame.get_column("acceptance_at").dt.epoch("us").to_list()
        forms = frame.get_column("form").cast(pl.String).to_list()
        tickers = frame.get_column("ticker").to_list() if "ticker" in frame.columns else [None] * frame.height
        return dict(zip(self._index, zip(forms, accepted, tickers, strict=True), strict=True))

    def tickers(self) -> list[str]:
        """Every ticker the answer key names (each once, in first-seen order)."""
        if "ticker" not in self._frame.columns:
            return []
        return [t for t in self._frame.get_column("ticker").unique(maintain_order=True).to_list() if t]
