"""``pim_tree`` and ``im_tree``: the Partitioned In-memory Merge-Tree of PIM-Tree §3.3 and the
In-memory Merge-Tree of §3.2 it extends.

Both have two components (§3.1):

- T_S, an immutable B+-tree (:mod:`~streamjoin.indexes.pim.css_tree`): a sorted leaf level of
  ``(key, ref)`` items and breadth-first inner keys; searched, never updated;
- T_I, mutable B+-trees (:mod:`~streamjoin.indexes.pim.bplus_tree`) that take every insert.

When T_I holds ``m · w`` items (``m`` the merge ratio, ``w`` the window) both are merged into a
new T_S, and the items that expired meanwhile are dropped in the same pass (§3.2). Until then an
expired item is only *flagged*: its ref is below the expiry bound, and every scan skips it.

PIM-Tree cuts T_I into subindexes B_0 … B_n, one per node of T_S at the insertion depth D_I
(§3.3.1). B_p takes the keys that T_S's descent routes through node ``p`` at depth D_I, so the
partitions follow T_S's inner nodes and adapt to the value distribution at each merge. The B_p
share one set of node arrays (a forest, :func:`~streamjoin.indexes.pim.bplus_tree.new_forest`): the
first leaf of B_p is leaf ``p`` and the tail of B_p links to it, so all of T_I is one sorted
leaf chain, and a scan has left B_p exactly when the next leaf's id is below the number of
partitions (the paper's *last leaf* flag, App. A.2). Each B_p has a lock slot; operations take
it as Alg. 1 and Alg. 2 prescribe, although here one thread runs them (numba has no atomics;
the slots document and check the protocol: all are free between operations).

IM-Tree is the same structure with D_I = 0: one partition, T_I a single B+-tree.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.checks import number
from streamjoin.indexes.base import WindowIndex, grow, key_range, register
from streamjoin.indexes.blocks.coded_level import NO_REF, CodedLevel
from streamjoin.indexes.blocks.grid_codes import bounds_on, scan_on
from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.blocks.key_order import is_sorted, stable_key_order
from streamjoin.indexes.blocks.no_refcount import njit_no_refcount
from streamjoin.indexes.blocks.sorted_runs import (
    largest,
    lower_bound,
    prefetch,
    prefetch_range,
    scan_run,
)
from streamjoin.indexes.pim.bplus_tree import (
    BPlusArrays,
    chain_items,
    check_forest,
    insert_into,
    new_forest,
    new_path,
    reserve,
    seek_leaf,
)
from streamjoin.indexes.pim.css_tree import CSSTree, build_css_tree, descend_css_tree
from streamjoin.indexes.pim.tree_shape import DEFAULT_SHAPE, TreeShape
from streamjoin.modes import Layout


class Partitions(NamedTuple):
    """T_I as the kernels take it: the subindexes B_0 … B_n in one forest, and how they split
    T_S's key range (:func:`partitions`)."""

    #: the forest's node arrays (:func:`~streamjoin.indexes.pim.bplus_tree.new_forest`)
    forest: BPlusArrays
    #: int64 (n_partitions, 2): each subindex's ``(root, height)``
    tops: np.ndarray
    #: T_S keys' dtype (n_partitions,): each subindex's upper key bound
    upper: np.ndarray
    #: int64 (n_partitions,): each subindex's lock slot
    locks: np.ndarray
    #: int64 (n_partitions,): inserts per subindex since the last merge
    counts: np.ndarray
    #: the insertion depth D_I used
    depth: int
    #: T_S leaves per subindex
    stride: int


@njit(cache=True, nogil=True)
def partitions(keys, offsets, fanout, leaf_size, insertion_depth):
    """The partitions of T_I for the T_S over ``keys`` (§3.3.1).

    The insertion depth is capped at the deepest inner level (the root is depth 0; a T_S with
    no inner level has one partition). Partition ``p`` is node ``p`` at that depth, which covers
    ``stride`` consecutive leaves, and holds the keys ``x`` with
    ``upper[p - 1] < x <= upper[p]``: the descent of ``x`` ends at the first leaf whose largest
    key is ``>= x``.

    Returns ``(depth, stride, upper)``: the insertion depth used, the leaves per partition, and
    ``(n_partitions,)`` upper key bounds in ``keys``' dtype (its largest value for partitions
    past the last key).
    O(n_partitions).
    """
    n = keys.shape[0]
    n_leaves = -(-n // leaf_size)
    levels = offsets.shape[0] - 1
    depth = max(0, min(insertion_depth, levels - 1))
    stride = fanout ** (levels - depth)
    upper = np.full(n_leaves // stride + 1, largest(keys))
    for p in range(n_leaves // stride):
        # the largest key of the partition's last leaf, the T_S inner key that separates it
        # from the next partition (Alg. 2 l. 31-32)
        upper[p] = keys[min((p + 1) * stride * leaf_size, n) - 1]
    return depth, stride, upper


@njit_no_refcount
def insert_partitioned(ti, ts, keys, refs, routes, path):
    """Insert a ``(key, ref)``-sorted batch into T_I (``ti``, :class:`Partitions`) by T_S's
    inner nodes (``ts``, :class:`~streamjoin.indexes.pim.css_tree.CSSTree`) (PIM-Tree Alg. 1).

    Each item descends ``depth`` levels of T_S to find its subindex, the node it reaches
    (with ``routes[j]``: the key itself, or for a compact T_S its lowest item bound, so that
    keys route by their codes)
    (l. 1-7; the paper's loop header reads "0 to D_I", one level too many for a node at depth
    D_I, and its comparison at l. 5 is printed the wrong way round, see
    :func:`~streamjoin.indexes.pim.css_tree.descend_css_tree`). A run of items bound for the same
    subindex is inserted under one acquisition of its lock (l. 8-11): sorted, the batch visits
    the subindexes in order, and ``counts[p]`` grows by the run's length (the per-subindex
    insert load of §5, Fig. 13a). The caller reserves node room (:func:`reserve`). ``path``:
    scratch of :func:`~streamjoin.indexes.pim.bplus_tree.new_path`. Compiled without
    reference counting (``_nrt=False``, as :func:`~streamjoin.indexes.pim.bplus_tree.
    insert_into`): it allocates nothing, and each subindex's run (about one per key) would
    pay two atomic updates for each array it passes or slices.
    O(b · (depth · log(fanout_S) + H'_I · log(fanout_I))), Eq. 6 step 3.
    """
    t, tops, locks, counts, depth = ti.forest, ti.tops, ti.locks, ti.counts, ti.depth
    inner, offsets, fanout = ts.inner, ts.offsets, ts.fanout
    b = keys.shape[0]
    start = 0
    p = descend_css_tree(inner, offsets, fanout, routes[0], depth)
    for j in range(1, b + 1):
        q = descend_css_tree(inner, offsets, fanout, routes[j], depth) if j < b else -1
        if q == p:
            continue
        locks[p] += 1  # l. 8
        # l. 9-10: fetch Roots[p], the B+-tree insert (tops[p] is updated if the root splits)
        insert_into(t, tops[p], keys[start:j], refs[start:j], path, np.bool_(False))
        locks[p] -= 1  # l. 11
        counts[p] += j - start
        start, p = j, q


#: How many keys ahead of the one being scanned a batched probe locates its scans' start (the
#: keys of their leaves are fetched twice as far ahead): enough loads in flight to cover memory
#: latency, few enough to stay in cache.
AHEAD = 8


@njit(cache=True, nogil=True)
def probe_partitioned(ts, ti, probe_keys, lo, hi, min_ref, grid, ref_base, side_keys, side_refs):
    """Items with ``lo <= key - probe_keys[i] <= hi`` and ``ref >= min_ref`` (PIM-Tree Alg. 2)
    in T_S (``ts``, :class:`~streamjoin.indexes.pim.css_tree.CSSTree`) and T_I (``ti``,
    :class:`Partitions`).

    A compact T_S (uint64 items on ``grid``, refs from ``ref_base``; its ``refs`` unused) is
    searched with its item bounds and returns a superset of its matches, which the
    caller refines (``exact`` is False); its side run ``(side_keys, side_refs)``, a sorted run
    of full keys (empty for a wide T_S), and T_I are tested exactly.

    One descent of T_S finds both the first leaf to scan and, as the node at the insertion
    depth on the way, the subindex that holds the bottom of the range; then T_S's leaf level and
    T_I's leaf chain are scanned from there. The batch runs in three stages so that the leaves
    (cold: the probes are spread over the whole window) load while other keys are worked on:
    first the descents of every key, of T_S and of the subindex down to its leaf (they touch
    only inner nodes, which stay in cache); then, ``2 · AHEAD`` keys ahead of the scans, the
    keys of both leaves are fetched, and ``AHEAD`` keys ahead each scan's start is searched in
    them and the line of refs there fetched; last the scans. Only the refs a scan reads are
    fetched: 14 cache lines per key with the default node sizes, not the 24 of both leaves
    whole (at a window of 2**20 the probe is bound by lines fetched; a prefetch of an address
    past an array's end never faults). Returns ``(probe_pos, refs)`` int64.
    O(m · (H_S · log(fanout_S) + H'_I · log(fanout_I)) + items scanned), Eq. 6 step 1.
    """
    ts_keys, ts_refs, inner, offsets, fanout, leaf_size = ts
    t, tops, upper, locks, stride = ti.forest, ti.tops, ti.upper, ti.locks, ti.stride
    n = ts_keys.shape[0]
    m = probe_keys.shape[0]
    n_parts = tops.shape[0]
    n_side = side_keys.shape[0]
    top, base, shift = largest(ts_keys), grid[0], grid[1]  # scalars: calls pass no array
    out_p = np.empty(64, dtype=np.int64)
    out_r = np.empty(64, dtype=np.int64)
    n_out = 0
    # T_I's leaves as flat arrays, made once: a row view per leaf visited would cost an
    # atomic reference-count update each
    size = t.leaf_keys.shape[1]
    ti_keys = t.leaf_keys.reshape(-1)
    ti_refs = t.leaf_refs.reshape(-1)
    # l. 1-9: descend T_S for Range.min; the node at depth D_I is the leaf's ancestor
    ts_at = np.empty(m, dtype=np.int64)  # the T_S leaf, then the scan's first position
    ti_leaf = np.empty(m, dtype=np.int64)  # the T_I leaf (l. 17)
    ti_at = np.empty(m, dtype=np.int64)  # the T_I scan's first position
    for i in range(m):
        vlo, vhi = key_range(probe_keys[i], lo, hi)
        blo, _ = bounds_on(top, vlo, vhi, base, shift)
        ts_at[i] = descend_css_tree(inner, offsets, fanout, blo, offsets.shape[0] - 1)
        sub = ts_at[i] // stride
        ti_leaf[i] = seek_leaf(t, tops[sub, 0], tops[sub, 1], vlo)
    subs = ts_at // stride  # l. 3-4
    for i in range(-2 * AHEAD, m):
        k = i + 2 * AHEAD
        if k < m:  # the keys of the leaves both scans start in
            start = min(ts_at[k] * leaf_size, n)
            prefetch_range(ts_keys, start, min(start + leaf_size, n))
            prefetch_range(ti_keys, ti_leaf[k] * size, ti_leaf[k] * size + size)
        k = i + AHEAD
        if 0 <= k < m:  # where they start (l. 10-15, 18), and the refs there
            vlo, vhi = key_range(probe_keys[k], lo, hi)
            blo, _ = bounds_on(top, vlo, vhi, base, shift)
            start = min(ts_at[k] * leaf_size, n)
            ts_at[k] = lower_bound(ts_keys, start, min(start + leaf_size, n), blo)
            prefetch(ts_refs, min(ts_at[k], n - 1))
            first = ti_leaf[k] * size
            ti_at[k] = lower_bound(ti_keys, first, first + t.leaf_count[ti_leaf[k]], vlo)
            prefetch(ti_refs, ti_at[k])
        if i < 0:
            continue
        key = probe_keys[i]
        vlo, vhi = key_range(key, lo, hi)
        _, bhi = bounds_on(top, vlo, vhi, base, shift)
        n_key = n_out  # this key's matches start here: scanned again if they did not fit
        while True:
            n_out = n_key
            sub = subs[i]
            # l. 10-15: scan T_S's leaf level from Range.min while keys <= Range.max
            n_out = scan_on(
                ts_keys,
                ts_refs,
                ts_at[i],
                n,
                key,
                lo,
                hi,
                bhi,
                min_ref,
                ref_base,
                i,
                out_p,
                out_r,
                n_out,
            )
            locks[sub] += 1  # l. 16
            # l. 17-18, located above, before the lock: fine single-threaded; with concurrent
            # inserts (PIM-Tree §4) they would have to be repeated under the lock
            node, pos = ti_leaf[i], ti_at[i]
            while True:  # l. 19-38
                n_out, done = scan_run(
                    ti_keys,
                    ti_refs,
                    pos,
                    node * size + t.leaf_count[node],
                    key,
                    lo,
                    hi,
                    vhi,
                    min_ref,
                    i,
                    out_p,
                    out_r,
                    n_out,
                )
                nxt = t.leaf_next[node]
                if done or nxt < 0:  # l. 25, 37-38
                    break
                if nxt < n_parts:  # l. 27: B_sub's last leaf; the next is B_{sub + 1}'s head
                    # l. 31-33, tested before the hop: later subindexes hold keys > upper[sub]
                    if bhi <= upper[sub]:
                        break
                    locks[sub + 1] += 1  # l. 28-30
                    locks[sub] -= 1
                    sub += 1
                node = nxt  # l. 29, 36, 39
                pos = node * size
            locks[sub] -= 1  # l. 39 (the paper's second "39")
            if n_out <= out_p.shape[0]:
                break
            out_p, out_r = grow(out_p, n_out), grow(out_r, n_out)
    for i in range(m if n_side else 0):  # the few keys a compact T_S holds outside its grid
        key = probe_keys[i]
        vlo, vhi = key_range(key, lo, hi)
        at = lower_bound(side_keys, 0, n_side, vlo)
        n_key = n_out
        while True:
            n_out, _ = scan_run(
                side_keys,
                side_refs,
                at,
                n_side,
                key,
                lo,
                hi,
                vhi,
                min_ref,
                i,
                out_p,
                out_r,
                n_key,
            )
            if n_out <= out_p.shape[0]:
                break
            out_p, out_r = grow(out_p, n_out), grow(out_r, n_out)
    return out_p[:n_out], out_r[:n_out]


_LINE = 64


def memory_traffic(
    window: int,
    merge_ratio: float = 0.125,
    layout: Layout = "wide",
    leaf_size: int = DEFAULT_SHAPE.leaf_size,
    css_leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
) -> dict[str, float]:
    """What one tuple costs a PIM-Tree in memory traffic, in the steady state of one stream's
    share of a join (each tuple probes once and is inserted once, W items held): a model
    written from the kernels, for reporting against this machine's memory roofline
    (:class:`streamjoin.roofline.Roofline`). The inner nodes of T_S and T_I are taken as
    cached (about 8 bytes per 32 items); leaves are cold (the keys are spread over the window).

    - *probe* (:func:`probe_partitioned`): the keys of the T_S leaf and of the T_I leaf where
      the scans start, and one line of refs in each (a compact T_S's items hold their refs):
      14 lines with the default node sizes, 13 compact;
    - *insert* (:func:`insert_partitioned`): the T_I leaf's keys searched, then on average half
      of its keys and refs moved one slot, read and written: 16 lines read, 8 written;
    - *merge* (:meth:`PIMTreeIndex._merge`), every ``m · w`` inserts: T_I's chain copied out
      (16 bytes per item read from leaves about 70% full, 16 written), then the old T_S read and
      the new one written (``w`` and ``w + m · w`` items of 16 or 8 bytes) and the chain read.

    Returns ``{"probe_bytes", "insert_bytes", "merge_bytes", "total_bytes", "cold_lines"}`` per
    tuple; ``cold_lines`` counts the probe's and the insert's random lines (what a fully
    dependent walk would wait for one after another)."""
    items = item_layout("pim_tree", layout)
    item = items.item_bytes
    # a leaf's 8-byte keys (or compact items), plus a line of refs beside wide keys
    ts_lines = -(-css_leaf_size * 8 // _LINE) + items.ref_lines
    ti_key_lines = -(-leaf_size * 8 // _LINE)
    probe_lines = ts_lines + ti_key_lines + 1
    insert_read, insert_written = 2 * ti_key_lines, ti_key_lines
    m = merge_ratio
    merge = (16 / 0.7 + 16 + 16) + item * (window + (window + m * window)) / (m * window)
    probe = probe_lines * _LINE
    insert = (insert_read + insert_written) * _LINE
    return {
        "probe_bytes": float(probe),
        "insert_bytes": float(insert),
        "merge_bytes": float(merge),
        "total_bytes": float(probe + insert + merge),
        "cold_lines": float(probe_lines + insert_read),
    }


def check_options(
    name: str,
    merge_ratio: float,
    insertion_depth: int,
    window: int | None,
    shape: TreeShape,
) -> TreeShape:
    """Raise ``ValueError``, naming index ``name`` and the option, for a PIM-Tree option of
    the wrong type or out of its range (this index's and the shared one's,
    :mod:`streamjoin.indexes.pim.shared`): ``insertion_depth`` up to 64 (the height of any
    tree of int64-many items), node sizes as :meth:`TreeShape.checked`, which gives the
    shape returned."""
    number(f"{name} merge_ratio", merge_ratio, low=0, high=1, low_open=True)
    number(f"{name} insertion_depth", insertion_depth, integer=True, low=0, high=64)
    if window is not None:
        number(f"{name} window", window, integer=True, low=1, high=2**63 - 1)
    return shape.checked(name)


@register
class PIMTreeIndex(WindowIndex):
    """PIM-Tree (§3.3): immutable T_S plus T_I partitioned by T_S's nodes at depth D_I.

    Complexity (w window, m merge ratio, H_S ≈ log_{css_fanout}(w / css_leaf_size) the height
    of T_S, H'_I the height of a subindex, about log_{fanout/2}(m · w / (P · leaf_size)) for
    P partitions): ``insert`` of b items O(b log b + b · (D_I · log(css_fanout) +
    H'_I · log(fanout))) plus, amortised, a merge O(w) every m · w items, i.e. O(1 / m) per
    item (Eq. 6 steps 2-3, Eq. 7); ``probe`` of m keys O(m log m + m · (H_S · log(css_fanout) +
    H'_I · log(fanout)) + items scanned), expired ones included (Eq. 6 step 1); ``expire``
    O(1) (flags by a bound). Memory: T_S 16 bytes per item (8 compact) plus
    ``8 / css_leaf_size`` of inner keys, in one of two buffers (a merge writes into the other;
    each up to 1.25 times the largest T_S + T_I merged so far); T_I at most m · w items in
    B+-tree nodes (up to 32 bytes per item in leaves); the node arrays keep their capacity
    across merges.

    Parameters
    ----------
    n_keys : int
        Must be 1.
    merge_ratio : float
        m in (0, 1]: T_I is merged into T_S when it holds ``m · w`` items (§3.2).
    insertion_depth : int
        D_I >= 0: T_I has one subindex per node of T_S at this depth (root: 0), capped at
        T_S's deepest inner level. Deeper means smaller subindexes (more room for concurrency)
        but colder ones for a single thread: 1 was fastest here (§5.2, Fig. 8c).
    window : int, optional
        w, the window in items. By default it is measured at each insert as the ref span of the
        live items (refs are consecutive store positions in a join core), which also serves
        time windows.
    fanout, leaf_size : int
        Node sizes of T_I's B+-trees (see ``bplus_tree``).
    css_fanout, css_leaf_size : int
        Node sizes of T_S (see ``css_tree``).
    layout : {"wide", "compact"}
        T_S's items: ``"wide"`` (default) a float64 key beside an int64 ref, exact probes;
        ``"compact"`` one uint64 each, a 32-bit code of the key on a grid that every merge
        re-fits exactly from the old codes (:mod:`~streamjoin.indexes.blocks.grid_codes`) above the
        ref's offset in T_S. About half the memory; T_S's probes return a superset that the
        caller refines on the full keys (``exact`` is False). T_I keeps full keys, and so
        does a small sorted side run of T_S for the keys its grid does not cover: far
        outliers, or keys that moved to another range while older items keep a grid too
        coarse for them (until those expire); probes test it exactly. A window must span
        fewer than 2**32 refs.

    Attributes
    ----------
    merges : int
        Merges of T_I into T_S so far.
    merge_seconds : float
        CPU time spent in them (thread time: what the merges cost, not counting the time other
        processes held the core). They run inside ``insert`` and count in its time.
    last_partition_inserts : numpy.ndarray
        int64 ``(n_partitions,)``: inserts per subindex in the period the last merge closed
        (empty before the first merge); see :attr:`partition_inserts`.
    """

    name = "pim_tree"
    takes_order = True

    def __init__(
        self,
        n_keys: int = 1,
        merge_ratio: float = 0.125,
        insertion_depth: int = 1,
        window: int | None = None,
        fanout: int = DEFAULT_SHAPE.fanout,
        leaf_size: int = DEFAULT_SHAPE.leaf_size,
        css_fanout: int = DEFAULT_SHAPE.css_fanout,
        css_leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
        layout: Layout = "wide",
    ) -> None:
        super().__init__(n_keys)
        self._items = item_layout(self.name, layout)
        shape = TreeShape(fanout, leaf_size, css_fanout, css_leaf_size)
        shape = check_options(self.name, merge_ratio, insertion_depth, window, shape)
        self.merge_ratio = float(merge_ratio)
        self.insertion_depth = int(insertion_depth)
        self.window = window
        self.fanout, self.leaf_size = shape.fanout, shape.leaf_size
        self.css_fanout, self.css_leaf_size = shape.css_fanout, shape.css_leaf_size
        self._before = NO_REF  # the expiry flag: items with smaller refs are expired
        self._first_ref: int | None = None
        self._last_ref: int | None = None
        self._n_ti = 0
        self._path = new_path()  # insert_partitioned's scratch
        # T_S's leaf level is a prefix of a (keys, refs) buffer pair; a merge writes into the
        # spare pair and the old one becomes the spare: fresh memory for every merge cost more
        # page faults than the merge itself
        self.layout = layout
        self.exact = self._items.exact
        self._ts_buf = self._spare = self._items.empty_level(0)
        # compact: T_S's grid, the ref its items count from, the largest ref merged into it,
        # and its side run, the (key, ref)-sorted items a merge left out of its grid
        self._coded = CodedLevel()
        self.merges = 0
        self.merge_seconds = 0.0
        self.last_partition_inserts = np.zeros(0, dtype=np.int64)
        self._rebuild(*self._ts_buf, reuse=None)

    def _rebuild(self, keys: np.ndarray, refs: np.ndarray, reuse: BPlusArrays | None) -> None:
        """Make ``(keys, refs)`` the leaf level of a new T_S, with empty T_I partitions (for a
        compact T_S ``keys`` are its items and ``refs`` is unused); T_I's node arrays are
        ``reuse``'s, the old T_I's (reused from merge to merge), or new ones if None."""
        self._ts_keys, self._ts_refs = keys, refs
        self._inner, self._offsets = build_css_tree(keys, self.css_fanout, self.css_leaf_size)
        self._depth, self._stride, self._upper = partitions(
            keys, self._offsets, self.css_fanout, self.css_leaf_size, self.insertion_depth
        )
        n_parts = len(self._upper)
        self._forest, self._tops = new_forest(n_parts, self.fanout, self.leaf_size, reuse)
        self._locks = np.zeros(n_parts, dtype=np.int64)
        self._inserts = np.zeros(n_parts, dtype=np.int64)
        self._n_ti = 0

    def _merge(self) -> None:
        """Merge T_I into T_S, dropping expired items (§3.2, §3.3.1; App. A, Fig. 14)."""
        t0 = time.thread_time()
        self.last_partition_inserts = self._inserts
        ti_keys, ti_refs = chain_items(self._forest, 0, self._n_ti)
        need = len(self._ts_keys) + len(self._coded.side_keys) + self._n_ti
        keys, refs = self._spare
        if len(keys) < need:  # room for a window a quarter larger before the next allocation
            keys, refs = self._items.empty_level(need + need // 4)
        # a compact T_S merges through its CodedLevel (the grid, the ref base, the side run)
        n = self._items.merge_level(
            self._coded, self._ts_keys, self._ts_refs, ti_keys, ti_refs, self._before, (keys, refs)
        )
        self._spare, self._ts_buf = self._ts_buf, (keys, refs)
        self._rebuild(keys[:n], refs[:n], reuse=self._forest)
        self.merges += 1
        self.merge_seconds += time.thread_time() - t0

    @property
    def partition_inserts(self) -> np.ndarray:
        """Inserts per T_I subindex since the last merge: int64 ``(n_partitions,)``, a copy.

        They sum to the items T_I holds (expired ones stay until the merge). Even counts mean
        the partitions fit the value distribution; a distribution that moved since the last
        merge piles them up in a few subindexes (§5, Fig. 13a). O(n_partitions).
        """
        return self._inserts.copy()

    def _merge_size(self) -> int:
        """m · w, with w the ``window`` option or the ref span of the live items."""
        w = self.window
        if not w:
            assert self._first_ref is not None and self._last_ref is not None  # (merged after one)
            w = self._last_ref + 1 - max(self._before, self._first_ref)
        return max(1, int(np.ceil(self.merge_ratio * w)))

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        if len(refs) == 0:
            return
        self._items.check_ref_span(self._coded, self.name, refs, self._first_ref, self._before)
        if self._first_ref is None:
            self._first_ref = int(refs[0])
        self._last_ref = int(refs[-1])
        # sorted, the batch walks T_S and the subindexes in order (a stable sort keeps equal
        # keys in ref order, so the batch is a (key, ref)-sorted run)
        order = stable_key_order(keys[0], order)
        run_keys, run_refs = (keys[0], refs) if order is None else (keys[0][order], refs[order])
        run_keys = np.ascontiguousarray(run_keys)
        routes = self._items.routes(run_keys, self._coded)
        self._forest = reserve(self._forest, self._n_ti + len(refs), len(refs), len(self._tops))
        insert_partitioned(
            self._partitions(), self._css_tree(), run_keys, run_refs, routes, self._path
        )
        self._n_ti += len(refs)
        if self._n_ti >= self._merge_size():
            self._merge()

    def probe(self, keys, lo, hi):
        # in key order the descents share T_S's inner nodes and meet leaves in address order
        # (measured in a 2**20 join: 25% less probe time, the sort included); the join core
        # probes in key order already
        order = None if is_sorted(keys[0]) else np.argsort(keys[0])
        pos, refs = probe_partitioned(
            self._css_tree(),
            self._partitions(),
            np.ascontiguousarray(keys[0] if order is None else keys[0][order]),
            lo[0],
            hi[0],
            self._before,
            self._coded.grid,
            self._coded.ref_base,
            self._coded.side_keys,
            self._coded.side_refs,
        )
        return (pos, refs) if order is None else (order[pos], refs)

    def _css_tree(self) -> CSSTree:
        """T_S as the kernels take it."""
        return CSSTree(
            self._ts_keys,
            self._ts_refs,
            self._inner,
            self._offsets,
            self.css_fanout,
            self.css_leaf_size,
        )

    def _partitions(self) -> Partitions:
        """T_I as the kernels take it (its node arrays grow: made for each call)."""
        return Partitions(
            self._forest,
            self._tops,
            self._upper,
            self._locks,
            self._inserts,
            self._depth,
            self._stride,
        )

    def expire(self, before_ref: int) -> None:
        self._before = max(self._before, int(before_ref))

    def __len__(self) -> int:
        return len(self._ts_keys) + len(self._coded.side_keys) + self._n_ti

    @property
    def nbytes(self) -> int:
        arrays = (
            *self._ts_buf,
            *self._spare,
            self._coded.side_keys,
            self._coded.side_refs,
            self._inner,
            self._offsets,
            self._upper,
            self._tops,
            self._locks,
            self._inserts,
            *self._forest,
        )
        return sum(a.nbytes for a in arrays)

    def check(self) -> None:
        keys, refs = self._ts_keys, self._ts_refs
        refs = self._items.check_level(self._coded, keys, refs)  # T_S's, a side run's included
        assert not any(np.shares_memory(a, b) for a in self._spare for b in (keys, refs)), (
            "the next merge writes into the spare buffers, which T_S must not use"
        )
        inner, offsets = build_css_tree(keys, self.css_fanout, self.css_leaf_size)
        assert np.array_equal(inner, self._inner) and np.array_equal(offsets, self._offsets)
        depth, stride, upper = partitions(
            keys, offsets, self.css_fanout, self.css_leaf_size, self.insertion_depth
        )
        assert (depth, stride) == (self._depth, self._stride) and np.array_equal(upper, self._upper)
        assert not self._locks.any(), "every lock released"
        held = check_forest(self._forest, self._tops)
        assert len(held) == len(upper), "one subindex per node at the insertion depth"
        assert np.array_equal(self._inserts, [len(items) for items in held]), (
            "insert counts: T_I keeps every item inserted since the last merge"
        )
        ti_refs = []
        for p, items in enumerate(held):
            for key, ref in items:
                route = self._items.routes(np.array([key]), self._coded)[0]
                part = descend_css_tree(inner, offsets, self.css_fanout, route, depth)
                assert part == p, f"item {(key, ref)} in subindex {p}, belongs to {part}"
                ti_refs.append(ref)
        assert len(ti_refs) == self._n_ti, "T_I item count"
        assert not ti_refs or not len(refs) or refs.max() < min(ti_refs), (
            "T_I holds what came after T_S"
        )
        assert len(set(ti_refs)) == len(ti_refs) and len(np.unique(refs)) == len(refs), (
            "refs unique"
        )


@register
class IMTreeIndex(PIMTreeIndex):
    """IM-Tree (§3.2): T_S plus one mutable B+-tree T_I, merged at m · w items.

    PIM-Tree with insertion depth 0: the root's range is the only partition, so T_I is a
    single B+-tree and an insert does not descend T_S. Complexity as PIM-Tree with
    H'_I = H_I, the height of a B+-tree of up to m · w items (Eq. 5).

    Parameters
    ----------
    n_keys, merge_ratio, window, fanout, leaf_size, css_fanout, css_leaf_size, layout
        As for ``pim_tree``.
    """

    name = "im_tree"

    def __init__(
        self,
        n_keys: int = 1,
        merge_ratio: float = 0.125,
        window: int | None = None,
        fanout: int = DEFAULT_SHAPE.fanout,
        leaf_size: int = DEFAULT_SHAPE.leaf_size,
        css_fanout: int = DEFAULT_SHAPE.css_fanout,
        css_leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
        layout: Layout = "wide",
    ) -> None:
        super().__init__(
            n_keys, merge_ratio, 0, window, fanout, leaf_size, css_fanout, css_leaf_size, layout
        )
