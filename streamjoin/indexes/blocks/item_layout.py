"""An index's item layout as one object: what differs between 16-byte and 8-byte items, so an
index asks its layout instead of comparing the ``layout`` option's string.

- *wide* (:data:`WIDE`): a float64 key beside an int64 ref, in two parallel arrays; probes
  test every key exactly.
- *compact* (:data:`COMPACT`): one uint64 word per item, a 32-bit code of the key above a
  32-bit offset of the ref (:mod:`~streamjoin.indexes.blocks.key_codes`,
  :mod:`~streamjoin.indexes.blocks.grid_codes`); half the memory, and probes return a superset
  of the band that the caller refines on the full keys.

A sorted level that every merge rebuilds (PIM-Tree's T_S, the standalone CSS-tree) keeps its
compact state in a :class:`~streamjoin.indexes.blocks.coded_level.CodedLevel`; the ``coded``
argument of the level methods below is that object (a wide layout ignores it). Structures that
pack a finished run once (BI-Sort's and the LLAT stores' full subwindows, the chained index's
archived CSS-trees) only ask :attr:`ItemLayout.packed`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from streamjoin.indexes.blocks.coded_level import CodedLevel
from streamjoin.indexes.blocks.grid_codes import route_items
from streamjoin.indexes.blocks.sorted_runs import merge_runs_into
from streamjoin.modes import LAYOUTS, Layout

#: The ``grid`` argument of a wide level's search (unused by it).
WIDE_GRID = np.array([0, 32], dtype=np.uint64)


class ItemLayout:
    """The items of an index: their size, dtype, and how a sorted level of them is allocated,
    merged, routed, searched and checked. Stateless; one instance per layout."""

    #: The ``layout`` option's value.
    name: ClassVar[Layout]
    #: Bytes per item.
    item_bytes: ClassVar[int]
    #: Whether an item is one word holding a key code and its ref (a level's refs array is
    #: then empty, and probes return a superset of the band).
    packed: ClassVar[bool]
    #: Cache lines of refs a probe reads beside the keys of the leaf where its scan starts.
    ref_lines: ClassVar[int]

    @property
    def exact(self) -> bool:
        """Whether probes return exactly the band (the index's ``exact``)."""
        return not self.packed

    def empty_level(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, refs)`` with room for a sorted level of ``n`` items. O(1)."""
        raise NotImplementedError

    def check_ref_span(
        self, coded: CodedLevel, owner: str, refs: np.ndarray, first_ref: int | None, before: int
    ) -> None:
        """A ``ValueError`` naming index ``owner``, before anything changes, if its level could
        not hold ``refs`` (:meth:`CodedLevel.check_ref_span`). O(len(refs))."""
        raise NotImplementedError

    def merge_level(
        self,
        coded: CodedLevel,
        keys: np.ndarray,
        refs: np.ndarray,
        run_keys: np.ndarray,
        run_refs: np.ndarray,
        before: int,
        out: tuple[np.ndarray, np.ndarray],
    ) -> int:
        """Merge the level ``keys``/``refs`` and the ``(key, ref)``-sorted run
        ``run_keys``/``run_refs`` (later refs) into ``out`` (from :meth:`empty_level`, room for
        the level, ``coded``'s side run and the run), dropping refs below ``before``; returns
        the items written. O(n)."""
        raise NotImplementedError

    def routes(self, keys: np.ndarray, coded: CodedLevel) -> np.ndarray:
        """What a descent of the level compares for float64 ``keys`` (the keys, or their
        lowest item bounds on ``coded``'s grid). O(len(keys))."""
        raise NotImplementedError

    def search_grid(self, coded: CodedLevel) -> tuple[np.ndarray, int]:
        """The ``(grid, ref_base)`` arguments of a search of the level."""
        raise NotImplementedError

    def check_level(self, coded: CodedLevel, keys: np.ndarray, refs: np.ndarray) -> np.ndarray:
        """Assert the level's invariants; returns the refs it holds (int64; compact: its side
        run's included). O(n log n)."""
        raise NotImplementedError


class _Wide(ItemLayout):
    name = "wide"
    item_bytes = 16
    packed = False
    ref_lines = 1

    def empty_level(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)

    def check_ref_span(
        self, coded: CodedLevel, owner: str, refs: np.ndarray, first_ref: int | None, before: int
    ) -> None:
        pass  # int64 refs hold any span

    def merge_level(self, coded, keys, refs, run_keys, run_refs, before, out) -> int:
        return merge_runs_into(keys, refs, run_keys, run_refs, before, *out)

    def routes(self, keys: np.ndarray, coded: CodedLevel) -> np.ndarray:
        return keys

    def search_grid(self, coded: CodedLevel) -> tuple[np.ndarray, int]:
        return WIDE_GRID, 0

    def check_level(self, coded: CodedLevel, keys: np.ndarray, refs: np.ndarray) -> np.ndarray:
        n = len(keys)
        assert keys.dtype == np.float64 and refs.dtype == np.int64 and refs.shape == (n,)
        assert np.array_equal(np.lexsort((refs, keys)), np.arange(n)), "sorted by (key, ref)"
        return refs


class _Compact(ItemLayout):
    name = "compact"
    item_bytes = 8
    packed = True
    ref_lines = 0

    def empty_level(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.empty(n, dtype=np.uint64), np.empty(0, dtype=np.int64)

    def check_ref_span(
        self, coded: CodedLevel, owner: str, refs: np.ndarray, first_ref: int | None, before: int
    ) -> None:
        coded.check_ref_span(owner, refs, first_ref, before)

    def merge_level(self, coded, keys, refs, run_keys, run_refs, before, out) -> int:
        return coded.merge(keys, run_keys, run_refs, before, out[0])

    def routes(self, keys: np.ndarray, coded: CodedLevel) -> np.ndarray:
        return route_items(keys, coded.grid)

    def search_grid(self, coded: CodedLevel) -> tuple[np.ndarray, int]:
        return coded.grid, coded.ref_base

    def check_level(self, coded: CodedLevel, keys: np.ndarray, refs: np.ndarray) -> np.ndarray:
        assert len(refs) == 0, "compact items hold their refs"
        return coded.check(keys)


WIDE: ItemLayout = _Wide()
COMPACT: ItemLayout = _Compact()
_BY_NAME: dict[object, ItemLayout] = {layout.name: layout for layout in (WIDE, COMPACT)}
assert tuple(_BY_NAME) == LAYOUTS, "one object per value of modes.Layout"


def item_layout(owner: str, layout: object) -> ItemLayout:
    """The :class:`ItemLayout` of the ``layout`` option of index ``owner``; a ``ValueError``
    naming the allowed values for any other value."""
    if layout not in LAYOUTS:
        allowed = " or ".join(map(repr, LAYOUTS))
        raise ValueError(f"{owner} layout must be {allowed}, got {layout!r}")
    return _BY_NAME[layout]
