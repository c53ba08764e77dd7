"""``css_tree``: the immutable B+-tree (CSS-tree) of PIM-Tree §3.1 and Alg. 3.

The leaf level is one array of items sorted by ``(key, ref)``, cut into leaves of
``leaf_size`` items. Inner nodes hold ``fanout - 1`` keys and no child references: they sit
level by level in breadth-first order in one flat array, and child ``j`` of node ``i`` at depth
``d`` is node ``i · fanout + j`` at depth ``d + 1`` (PIM-Tree App. A.3), or leaf
``i · fanout + j`` below the last inner level. Dropping the references leaves room for a higher
fan-out than a pointer-based B+-tree, hence a shallower tree and faster lookups.

Every leaf's largest key is stored once, in in-order position (Alg. 3); unused slots hold
``+inf``. A descent that counts the keys below ``x`` in each node therefore ends at the first
leaf whose largest key is ``>= x``, i.e. the leaf holding the first item ``>= x``.

:func:`build_css_tree`, :func:`descend_css_tree` and :func:`search_css_tree` take plain arrays,
so the static component of IM-Tree / PIM-Tree reuses them; :class:`CSSTreeIndex` is the tree as
a standalone window index, rebuilt on every insert.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import WindowIndex, grow, key_range, node_size, register
from streamjoin.indexes.blocks.coded_level import NO_REF, CodedLevel
from streamjoin.indexes.blocks.grid_codes import bounds_on, scan_on
from streamjoin.indexes.blocks.item_layout import WIDE_GRID, item_layout
from streamjoin.indexes.blocks.key_order import stable_key_order
from streamjoin.indexes.blocks.sorted_runs import PROBE_GROUP, largest, lower_bound, prefetch_range
from streamjoin.indexes.pim.tree_shape import DEFAULT_SHAPE
from streamjoin.modes import Layout


class CSSTree(NamedTuple):
    """An immutable B+-tree as the kernels search it: its leaf level, the inner keys
    :func:`build_css_tree` made over it, and the node sizes they were made with."""

    #: float64 (n,) keys, or the uint64 items of a compact layout, in ``(key, ref)`` order
    keys: np.ndarray
    #: int64 (n,): the items' refs (unused for compact items, which hold them)
    refs: np.ndarray
    #: keys' dtype: the inner-node keys, breadth first (:func:`build_css_tree`)
    inner: np.ndarray
    #: int64 (depth + 1,): where each depth starts in ``inner``
    offsets: np.ndarray
    #: children per inner node
    fanout: int
    #: items per leaf
    leaf_size: int


@njit(cache=True, nogil=True)
def build_css_tree(keys, fanout, leaf_size):
    """Inner nodes of the immutable B+-tree over sorted ``keys`` (PIM-Tree Alg. 3).

    Parameters
    ----------
    keys : float64 or uint64 (n,)
        The leaf level, non-decreasing (float64 keys, or the uint64 items of a compact
        layout, non-decreasing in their key codes).
    fanout : int
        Children per inner node (>= 2); a node holds ``fanout - 1`` keys.
    leaf_size : int
        Items per leaf (>= 1); the last leaf may be shorter.

    Returns
    -------
    inner : keys' dtype (offsets[-1],)
        Inner-node keys in breadth-first order, ``fanout - 1`` per node, the dtype's largest
        value (``+inf``) where unused.
    offsets : int64 (depth + 1,)
        ``inner[offsets[d]:offsets[d + 1]]`` is depth ``d`` (the root is depth 0).

    Complexity O(n / leaf_size) after the leaf level is sorted (Eq. 7).
    """
    n = keys.shape[0]
    n_leaves = -(-n // leaf_size)
    width = fanout - 1
    # l. 1: a full tree of depth d has fanout**d - 1 key slots, and each leaf needs one
    depth, span = 0, 1
    while span <= n_leaves:
        depth += 1
        span *= fanout
    # l. 2-7: node i at depth k covers leaves [i·f^h, (i+1)·f^h) with h = depth - k. Allocate
    # every node a descent can reach (its first leaf <= n_leaves, the end position), even if
    # Alg. 3 writes no key into it, so descents never leave the array.
    offsets = np.zeros(depth + 1, dtype=np.int64)
    for k in range(depth):
        offsets[k + 1] = offsets[k] + (n_leaves // span + 1) * width
        span //= fanout
    inner = np.full(offsets[depth], largest(keys))
    # l. 8-23: hand out leaf maxima in leaf order to the deepest level whose current node has
    # room; a full node is closed and the key goes one level up, which is in-order placement
    node_size = np.zeros(depth, dtype=np.int64)
    slot = offsets[:depth].copy()  # Current_Slot, as an absolute position in `inner`
    for leaf in range(n_leaves):
        k = depth - 1
        while node_size[k] == width:
            node_size[k] = 0
            k -= 1
        inner[slot[k]] = keys[min((leaf + 1) * leaf_size, n) - 1]
        node_size[k] += 1
        slot[k] += 1
    return inner, offsets


@njit(cache=True, nogil=True)
def descend_css_tree(inner, offsets, fanout, x, levels):
    """Index of the node at depth ``levels`` on the path to the first item ``>= x``.

    With ``levels = len(offsets) - 1`` that is the leaf holding the first item ``>= x``, or the
    leaf count when every item is below ``x``. PIM-Tree Alg. 1 l. 1-7 (its comparison at l. 5
    is printed the wrong way round: the descent skips the keys below ``x``).
    O(levels · log(fanout)).
    """
    width = fanout - 1
    p = 0
    for d in range(levels):
        node = offsets[d] + p * width
        p = p * fanout + lower_bound(inner, node, node + width, x) - node
    return p


@njit(cache=True, nogil=True)
def search_css_tree(tree, probe_keys, lo, hi, min_ref, grid, ref_base):
    """Items of ``tree`` (:class:`CSSTree`) with ``lo <= key - probe_keys[i] <= hi`` and
    ``ref >= min_ref``, for every ``i``.

    The leaf level holds float64 keys beside int64 refs, tested exactly (``grid`` and
    ``ref_base`` unused), or compact uint64 items on the grid ``(base, shift)`` with refs from
    ``ref_base`` (:mod:`~streamjoin.indexes.blocks.grid_codes`; ``refs`` unused), whose
    matches come back as a superset for the caller to refine; ``probe_keys`` float64 (m,).
    Returns ``(probe_pos, refs)`` int64. The descents go
    :data:`~streamjoin.indexes.blocks.sorted_runs.PROBE_GROUP` keys at a time, a level at a
    time, each level's nodes prefetched for the group first; the scans then go key by key.
    O(m · (depth · log(fanout) + log(leaf_size)) + items scanned), where the scan covers the
    widened key interval, expired items included.
    """
    keys, refs, inner, offsets, fanout, leaf_size = tree
    n = keys.shape[0]
    m = probe_keys.shape[0]
    depth = offsets.shape[0] - 1
    width = fanout - 1
    top, base, shift = largest(keys), grid[0], grid[1]  # scalars: calls pass no array
    out_p = np.empty(64, dtype=np.int64)
    out_r = np.empty(64, dtype=np.int64)
    n_out = 0
    at = np.empty(PROBE_GROUP, dtype=np.int64)  # each key's node on the way down
    bound = np.empty(PROBE_GROUP, dtype=keys.dtype)  # each key's lower bound on the level
    for g0 in range(0, m, PROBE_GROUP):
        gm = min(PROBE_GROUP, m - g0)
        for g in range(gm):
            vlo, vhi = key_range(probe_keys[g0 + g], lo, hi)
            bound[g] = bounds_on(top, vlo, vhi, base, shift)[0]
            at[g] = 0
        # Alg. 1 l. 1-7 for the group, a level at a time: the level's nodes fetched first
        for d in range(depth):
            off = offsets[d]
            for g in range(gm):
                node = off + at[g] * width
                prefetch_range(inner, node, node + width)
            for g in range(gm):
                node = off + at[g] * width
                at[g] = at[g] * fanout + lower_bound(inner, node, node + width, bound[g]) - node
        for g in range(gm):
            start = min(at[g] * leaf_size, n)
            prefetch_range(keys, start, min(start + leaf_size, n))
        for g in range(gm):
            i = g0 + g
            key = probe_keys[i]
            vlo, vhi = key_range(key, lo, hi)
            blo, bhi = bounds_on(top, vlo, vhi, base, shift)
            start = min(at[g] * leaf_size, n)
            # Alg. 2 l. 10-15: find the lower bound in the leaf, then scan the leaf level up
            # to the upper bound
            p = lower_bound(keys, start, min(start + leaf_size, n), blo)
            n_key = n_out
            while True:  # again into grown outputs if the key's matches did not fit
                n_out = scan_on(
                    keys, refs, p, n, key, lo, hi, bhi, min_ref, ref_base, i, out_p, out_r, n_key
                )
                if n_out <= out_p.shape[0]:
                    break
                out_p, out_r = grow(out_p, n_out), grow(out_r, n_out)
    return out_p[:n_out], out_r[:n_out]


@register
class CSSTreeIndex(WindowIndex):
    """Immutable B+-tree (CSS-tree) as a window index: every insert merges and rebuilds.

    Expiry is lazy: ``expire`` only raises a bound; probes skip items below it and the next
    insert drops them while merging. Built for read-mostly use (the static part of IM-Tree /
    PIM-Tree); as a standalone index each insert costs a full rebuild.

    Complexity: ``insert`` of b items O(n + b log b) (merge, then Alg. 3);
    ``probe`` O(m · (depth · log(fanout) + log(leaf_size)) + items scanned) with
    depth ≈ log_fanout(n / leaf_size); ``expire`` O(1). Memory: 16 bytes per item (8
    compact) plus about ``8 / leaf_size`` bytes per item of inner keys.

    Parameters
    ----------
    n_keys : int
        Must be 1.
    fanout : int
        Children per inner node, >= 2 (``fanout - 1`` keys; default 65: 64 keys, 512 bytes).
    leaf_size : int
        Items per leaf, >= 1.
    layout : {"wide", "compact"}
        The items: ``"wide"`` (default) a float64 key beside an int64 ref, exact probes;
        ``"compact"`` one uint64 each, a 32-bit code of the key on a grid that every merge
        re-fits exactly from the old codes, above the ref's offset
        (:class:`~streamjoin.indexes.blocks.coded_level.CodedLevel`, as PIM-Tree's compact T_S).
        About half the memory; probes return a superset that the caller refines on the full
        keys (``exact`` is False), and keys the grid does not cover wait whole in a small
        side run, probed exactly. A window must span fewer than 2**32 refs.
    """

    name = "css_tree"
    takes_order = True

    def __init__(
        self,
        n_keys: int = 1,
        fanout: int = DEFAULT_SHAPE.css_fanout,
        leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
        layout: Layout = "wide",
    ) -> None:
        super().__init__(n_keys)
        self.fanout = node_size(self.name, "fanout", fanout, 2)
        self.leaf_size = node_size(self.name, "leaf_size", leaf_size, 1)
        self._items = item_layout(self.name, layout)
        self.layout = layout
        self.exact = self._items.exact
        self._keys, self._refs = self._items.empty_level(0)
        self._before_ref = NO_REF
        self._first_ref: int | None = None
        self._coded = CodedLevel()  # compact: the grid, the ref base and the side run
        self._inner, self._offsets = build_css_tree(self._keys, self.fanout, self.leaf_size)
        self._side_tree = build_css_tree(self._coded.side_keys, self.fanout, self.leaf_size)

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        if len(refs) == 0:
            return
        coded = self._coded
        self._items.check_ref_span(coded, self.name, refs, self._first_ref, self._before_ref)
        if self._first_ref is None:
            self._first_ref = int(refs[0])
        # a stable sort keeps equal keys in ref order: the batch becomes a (key, ref)-sorted run
        order = stable_key_order(keys[0], order)
        run_keys, run_refs = (keys[0], refs) if order is None else (keys[0][order], refs[order])
        run_keys = np.ascontiguousarray(run_keys)
        # a new level, views of the surviving length (a copy to the exact length would stream
        # the whole level a second time; the slack is at most what expired)
        out = self._items.empty_level(len(self._keys) + len(coded.side_keys) + len(run_keys))
        n = self._items.merge_level(
            coded, self._keys, self._refs, run_keys, run_refs, self._before_ref, out
        )
        self._keys, self._refs = out[0][:n], out[1][:n]
        self._side_tree = build_css_tree(coded.side_keys, self.fanout, self.leaf_size)
        self._inner, self._offsets = build_css_tree(self._keys, self.fanout, self.leaf_size)

    def probe(self, keys, lo, hi):
        probe_keys = np.ascontiguousarray(keys[0])
        coded = self._coded
        grid, ref_base = self._items.search_grid(coded)
        tree = CSSTree(
            self._keys, self._refs, self._inner, self._offsets, self.fanout, self.leaf_size
        )
        found = search_css_tree(
            tree,
            probe_keys,
            lo[0],
            hi[0],
            self._before_ref,
            grid,
            ref_base,
        )
        if not len(coded.side_keys):
            return found
        side_tree = CSSTree(
            coded.side_keys, coded.side_refs, *self._side_tree, self.fanout, self.leaf_size
        )
        side = search_css_tree(  # the keys the grid left out, whole: tested exactly
            side_tree,
            probe_keys,
            lo[0],
            hi[0],
            self._before_ref,
            WIDE_GRID,
            0,
        )
        return np.concatenate([found[0], side[0]]), np.concatenate([found[1], side[1]])

    def expire(self, before_ref: int) -> None:
        self._before_ref = max(self._before_ref, int(before_ref))

    def __len__(self) -> int:
        return len(self._keys) + len(self._coded.side_keys)

    @property
    def nbytes(self) -> int:
        arrays = (self._keys, self._refs, self._inner, self._offsets, *self._side_tree)
        return sum(a.nbytes for a in arrays) + self._coded.nbytes

    def check(self) -> None:
        keys, refs, inner, offsets = self._keys, self._refs, self._inner, self._offsets
        f, size, n = self.fanout, self.leaf_size, len(keys)
        refs = self._items.check_level(self._coded, keys, refs)  # a side run's included
        assert len(np.unique(refs)) == len(refs), "refs are unique"
        n_leaves = -(-n // size)
        depth = len(offsets) - 1
        assert offsets[0] == 0 and len(inner) == offsets[-1]
        assert f**depth > n_leaves and (depth == 0 or f ** (depth - 1) <= n_leaves), "minimal depth"
        leaf_max = keys[np.minimum(np.arange(1, n_leaves + 1) * size, n) - 1]
        top = np.iinfo(np.uint64).max if keys.dtype == np.uint64 else np.inf
        for k in range(depth):
            h = depth - k
            n_nodes = n_leaves // f**h + 1
            assert offsets[k + 1] - offsets[k] == n_nodes * (f - 1), f"level {k} size"
            node, j = np.divmod(np.arange(n_nodes * (f - 1)), f - 1)
            # slot j of node i separates its children j and j + 1: the largest key of the last
            # leaf under child j
            leaf = node * f**h + (j + 1) * f ** (h - 1) - 1
            want = np.where(leaf < n_leaves, leaf_max[np.minimum(leaf, n_leaves - 1)], top)
            assert np.array_equal(inner[offsets[k] : offsets[k + 1]], want), f"level {k} keys"
