"""A sorted level of 8-byte grid-coded items that is rebuilt by merging, with what it needs to
stay exact across merges: its grid, the ref its items count from, and a side run of whole keys.

PIM-Tree's and IM-Tree's compact T_S and the compact standalone CSS-tree are such levels:
every merge writes a new level from the old items and a sorted run of new ones. The old items
no longer hold their keys, so the old codes are re-gridded exactly (integer arithmetic on the
codes, :func:`~streamjoin.indexes.blocks.grid_codes.regrid`), and the new keys that the chosen grid
does not cover unclamped (far outliers, or keys that moved to another range while older items
keep a grid too coarse for them) wait with their whole keys in the side run, probed exactly,
until a later merge can code them (:mod:`~streamjoin.indexes.blocks.grid_codes` says how the grid is
chosen).
"""

from __future__ import annotations

import numpy as np

from streamjoin.indexes.blocks.grid_codes import (
    bulk_window,
    choose_grid,
    grid_span,
    image_range,
    merge_grid_items_into,
    regrid,
    span_slice,
)
from streamjoin.indexes.blocks.key_codes import REF_SPAN
from streamjoin.indexes.blocks.sorted_runs import merge_runs

#: A ref below every ref.
NO_REF = np.iinfo(np.int64).min


class CodedLevel:
    """The state of a grid-coded level between merges (the items are the owner's array).

    Attributes
    ----------
    grid : numpy.ndarray
        uint64 ``(base, shift)`` of the items' codes.
    ref_base : int
        The ref that item offsets count from.
    last_ref : int
        The largest ref merged into the items (once it is below the expiry bound, no old
        item survives and the grid may be chosen afresh).
    side_keys, side_refs : numpy.ndarray
        float64 and int64: the ``(key, ref)``-sorted items the grid left out, whole.
    """

    def __init__(self) -> None:
        self.grid = np.array([0, 32], dtype=np.uint64)
        self.ref_base = 0
        self.last_ref = NO_REF
        self.side_keys, self.side_refs = np.empty(0), np.empty(0, dtype=np.int64)

    def merge(
        self,
        old: np.ndarray,
        keys: np.ndarray,
        refs: np.ndarray,
        before: int,
        out: np.ndarray,
    ) -> int:
        """Merge the level's items ``old``, its side run and the ``(key, ref)``-sorted run
        ``keys``/``refs`` into ``out`` (uint64, room for all of them) and a new side run,
        dropping items with refs below ``before``; returns the items written. O(n)."""
        new_run = keys
        if len(self.side_keys):
            keys, refs = merge_runs(self.side_keys, self.side_refs, keys, refs, before)
        old_grid = (int(self.grid[0]), int(self.grid[1]))
        survive = len(old) > 0 and self.last_ref >= before
        if not survive:
            old = old[:0]
        old_range = (
            image_range(*old_grid, int(old[0] >> 32), int(old[-1] >> 32)) if survive else None
        )
        grid, takes = old_grid, False
        if len(keys):
            window = bulk_window(new_run)  # of the new keys only: the side run holds outliers
            grid, takes = choose_grid(*window, old_grid if survive else None, old_range)
        i0 = i1 = 0
        if takes:  # the keys the grid codes unclamped go into the level
            i0, i1 = span_slice(keys, *(np.uint64(x) for x in grid_span(grid)))
        new_keys, new_refs = keys[i0:i1], refs[i0:i1]
        if i0 == 0 and i1 == len(keys):
            self.side_keys, self.side_refs = keys[:0], refs[:0]
        else:
            self.side_keys = np.concatenate([keys[:i0], keys[i1:]])
            self.side_refs = np.concatenate([refs[:i0], refs[i1:]])
        # refs count from at most the oldest that the level keeps: a side item joining it may
        # be older than every old item
        oldest = [self.ref_base] if survive else []
        if len(new_refs):
            oldest.append(int(new_refs.min()))
        ref_base = max(before, min(oldest)) if oldest else 0
        if not survive:
            old_grid = grid
        add, shift = regrid(old_grid, grid)
        n = merge_grid_items_into(
            old,
            add,
            shift,
            np.uint64((self.ref_base - ref_base) % 2**64),
            self.ref_base,
            new_keys,
            new_refs,
            np.uint64(grid[0]),
            np.uint64(grid[1]),
            ref_base,
            before,
            out,
        )
        last = self.last_ref if survive else NO_REF
        self.last_ref = max(last, int(new_refs.max())) if len(new_refs) else last
        self.grid = np.array(grid, dtype=np.uint64)
        self.ref_base = ref_base
        return n

    @staticmethod
    def check_ref_span(name: str, refs: np.ndarray, first_ref: int | None, before: int) -> None:
        """A ``ValueError``, before anything changes, if a level of index ``name`` would have
        to hold refs :data:`~streamjoin.indexes.blocks.key_codes.REF_SPAN` or more apart (a window
        of 2**32 items): ``refs`` arrive after ``first_ref`` (None: they are the first), and
        items with refs below ``before`` are expired."""
        first = int(refs[0]) if first_ref is None else first_ref
        if int(refs.max()) - max(first, before) >= REF_SPAN:
            raise ValueError(
                f"{name} layout='compact': the window spans 2**32 refs or more; use layout='wide'"
            )

    def check(self, items: np.ndarray) -> np.ndarray:
        """Assert the invariants of the level whose items are ``items``: sorted by key code,
        refs up to the last merged, the side run sorted by ``(key, ref)`` and disjoint from
        the items. Returns the refs the level holds, items' then the side run's (int64)."""
        assert items.dtype == np.uint64 and np.all(items[1:] >> 32 >= items[:-1] >> 32), (
            "items sorted by key code"
        )
        refs = (items & np.uint64(2**32 - 1)).astype(np.int64) + self.ref_base
        assert not len(refs) or refs.max() <= self.last_ref, "refs up to the last merged"
        side_k, side_r = self.side_keys, self.side_refs
        assert np.array_equal(np.lexsort((side_r, side_k)), np.arange(len(side_k))), (
            "the side run sorted by (key, ref)"
        )
        assert not len(np.intersect1d(refs, side_r)), "an item in the level or the side run"
        return np.concatenate([refs, side_r])

    @property
    def nbytes(self) -> int:
        """Bytes of the side run (the items are the owner's)."""
        return self.side_keys.nbytes + self.side_refs.nbytes
