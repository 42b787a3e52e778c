"""The harness's own entry tables: for each row, the calendar index of the session at whose bell a clock makes it
knowable. The runner decides picks with them (never with anything the agent was handed) and verify's replay
checks those decisions with the same tables.

A run asks for one table per clock over the same rows, so the tables share one index of the row keys and each
holds its clock's entries as a compact array: three clocks cost one dictionary of keys, not three.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence

import polars as pl

from evalkit_core import Calendar, Clock, Release, with_entry

__all__ = ["EntryTable", "entries_of", "entry_table", "key_index"]

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
