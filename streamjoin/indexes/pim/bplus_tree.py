"""``bplus_tree``: a mutable B+-tree in flat numpy arrays, the IBWJ baseline of PIM-Tree §2.2.1.

Items are ordered by ``(key, ref)``: refs are unique, so duplicate keys still have one place
each and an expired item is deleted by a single descent. Nodes are rows of 2-d arrays:

- leaves hold up to ``leaf_size`` items (``leaf_keys``, ``leaf_refs``) and a link to the next
  leaf, so a range search descends once and then walks the leaf chain (§2.2.1 step 1);
- inner nodes hold up to ``fanout`` entries ``(key, ref, child)``; the ``(key, ref)`` of entry
  ``j >= 1`` is the separator below which child ``j`` holds nothing (entry 0's pair is unused),
  so child ``j`` holds the items in ``[sep_j, sep_{j+1})``.

Every node but the root is at least half full, ``(capacity + 1) // 2`` entries; inserts split
full nodes and deletes borrow from or merge with a sibling. Leaf 0 is always the first leaf of
the chain (splits and merges keep the left node). Released nodes go on free lists (threaded
through ``leaf_next`` and column 0 of ``inner_child``). Splits push the right node's first
``(key, ref)`` up, which is its separator in both leaves and inner nodes, so one routine splits
both kinds; before moving entries between inner siblings, the right one's slot 0 is refreshed
with its separator from the parent, which makes entries self-describing and lets one routine
borrow and merge for both kinds too (``inner`` selects whether a child column moves along).

The index keeps its items in insertion order as well (a log of ``(key, ref)``): expiry needs
the keys of the items that fall out of the window to find them in the tree.

The kernels name a tree by its ``(root, height)`` pair (``top``), so several trees can share
one set of node arrays: a *forest* (:func:`new_forest`), whose tree ``p`` starts at leaf ``p``
and whose leaf chains run on from one tree into the next, as PIM-Tree's partitioned T_I needs
(§3.3.1). A lone tree keeps its pair in ``meta[ROOT:HEIGHT + 1]``.

Why one file of ~740 lines: every kernel here (insert, delete with borrow and merge, probe,
the forest's chain walk) relies on the same node layout and its invariants (half-full nodes,
self-describing separators, free lists threaded through the arrays), stated once above; split
by operation, each file would need this whole description to be read correctly.
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import WindowIndex, grow, key_range, node_size, register
from streamjoin.indexes.blocks.atomics import atomic_add
from streamjoin.indexes.blocks.key_order import stable_key_order, stable_order
from streamjoin.indexes.blocks.no_refcount import njit_no_refcount
from streamjoin.indexes.blocks.sorted_runs import (
    PROBE_GROUP,
    lower_bound_row,
    prefetch,
    prefetch_range,
    scan_run,
)
from streamjoin.indexes.pim.tree_shape import DEFAULT_SHAPE

# slots of BPlusArrays.meta
ROOT, HEIGHT, LEAF_HWM, LEAF_FREE, INNER_HWM, INNER_FREE = range(6)
#: Height bound for the path buffers: every inner node has >= 2 children, so 2**64 items.
MAX_HEIGHT = 64
_NO_REF = np.iinfo(np.int64).min


class BPlusArrays(NamedTuple):
    """State of one B+-tree; kernels mutate it in place (growth replaces arrays)."""

    #: float64 (leaf_cap, leaf_size): keys of each leaf, ascending with refs in its first count
    leaf_keys: np.ndarray
    #: int64 (leaf_cap, leaf_size)
    leaf_refs: np.ndarray
    #: int64 (leaf_cap,): items per leaf
    leaf_count: np.ndarray
    #: int64 (leaf_cap,): next leaf in key order (-1 at the end), or next free leaf
    leaf_next: np.ndarray
    #: float64 (inner_cap, fanout): separator keys (slot 0 unused)
    inner_keys: np.ndarray
    #: int64 (inner_cap, fanout): separator refs (slot 0 unused)
    inner_refs: np.ndarray
    #: int64 (inner_cap, fanout): child ids (leaves at the last inner level); slot 0 links
    #: free nodes
    inner_child: np.ndarray
    #: int64 (inner_cap,): children per inner node
    inner_count: np.ndarray
    #: int64 (6,): root id, height (0: the root is a leaf), high-water marks and free-list heads
    meta: np.ndarray


def new_tree(fanout: int, leaf_size: int, leaf_cap: int, inner_cap: int) -> BPlusArrays:
    """An empty tree: leaf 0 is the root."""
    meta = np.zeros(6, dtype=np.int64)
    meta[LEAF_HWM] = 1
    meta[LEAF_FREE] = meta[INNER_FREE] = -1
    leaf_next = np.empty(leaf_cap, dtype=np.int64)
    leaf_next[0] = -1
    leaf_count = np.empty(leaf_cap, dtype=np.int64)
    leaf_count[0] = 0
    return BPlusArrays(
        np.empty((leaf_cap, leaf_size)),
        np.empty((leaf_cap, leaf_size), dtype=np.int64),
        leaf_count,
        leaf_next,
        np.empty((inner_cap, fanout)),
        np.empty((inner_cap, fanout), dtype=np.int64),
        np.empty((inner_cap, fanout), dtype=np.int64),
        np.empty(inner_cap, dtype=np.int64),
        meta,
    )


# --------------------------------------------------------------------------------------------
# Node primitives (shared by leaves and inner nodes; `inner` says whether `child` moves along)
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _pair_lower_bound(keys, refs, node, start, stop, k, r):
    """First position in ``[start, stop)`` of node ``node`` (a row of the 2-d ``keys`` and
    ``refs``, read in place: a row view per level cost two atomic reference-count updates)
    whose ``(key, ref)`` is not below ``(k, r)``."""
    while start < stop:
        mid = (start + stop) >> 1
        key = keys[node, mid]
        if key < k or (key == k and refs[node, mid] < r):
            start = mid + 1
        else:
            stop = mid
    return start


@njit(cache=True, nogil=True, inline="always")
def _put(keys, refs, child, inner, node, j, k, r, c):
    keys[node, j] = k
    refs[node, j] = r
    if inner:
        child[node, j] = c


@njit(cache=True, nogil=True, inline="always")
def _copy(keys, refs, child, inner, src, i, dst, j):
    _put(
        keys, refs, child, inner, dst, j, keys[src, i], refs[src, i], child[src, i] if inner else 0
    )


@njit(cache=True, nogil=True, inline="always")
def _shift(keys, refs, child, inner, node, start, stop, by):
    """Move entries ``[start, stop)`` of ``node`` by ``by`` (+1 or -1) slots."""
    if by > 0:
        for i in range(stop - 1, start - 1, -1):
            _copy(keys, refs, child, inner, node, i, node, i + by)
    else:
        for i in range(start, stop):
            _copy(keys, refs, child, inner, node, i, node, i + by)


@njit(cache=True, nogil=True, inline="always")
def _alloc(meta, free, hwm, link):
    """A node id from the free list ``meta[free]`` (linked through ``link``), else a fresh one.

    A fresh id is taken with an atomic add: the trees of a forest (PIM-Tree's T_I subindexes)
    are updated by several threads at once, each under its own tree's lock, and share the
    high-water mark (PIM-Tree §3.3.3). Free lists only fill by deletes, which no forest shared
    that way does.
    """
    node = meta[free]
    if node >= 0:
        meta[free] = link[node]
    else:
        node = atomic_add(meta, hwm, 1)
    return node


@njit(cache=True, nogil=True, inline="always")
def _release(meta, free, link, node):
    link[node] = meta[free]
    meta[free] = node


@njit(cache=True, nogil=True, inline="always")
def _insert_entry(keys, refs, child, count, inner, node, p, k, r, c):
    """Put entry ``(k, r, c)`` at slot ``p`` of a node that has room."""
    _shift(keys, refs, child, inner, node, p, count[node], 1)
    _put(keys, refs, child, inner, node, p, k, r, c)
    count[node] += 1


@njit_no_refcount
def _split_insert(keys, refs, child, count, inner, node, new, p, k, r, c):
    """Insert ``(k, r, c)`` at slot ``p`` of the full ``node``, moving the upper half to ``new``.

    Of the ``capacity + 1`` entries the left node keeps ``(capacity + 1) // 2``: both halves
    are at least half full.
    """
    cap = keys.shape[1]
    half = (cap + 1) // 2
    for t in range(half, cap + 1):  # entry t of the virtual row with (k, r, c) at p
        if t < p:
            _copy(keys, refs, child, inner, node, t, new, t - half)
        elif t == p:
            _put(keys, refs, child, inner, new, t - half, k, r, c)
        else:
            _copy(keys, refs, child, inner, node, t - 1, new, t - half)
    if p < half:
        _shift(keys, refs, child, inner, node, p, half - 1, 1)
        _put(keys, refs, child, inner, node, p, k, r, c)
    count[node] = half
    count[new] = cap + 1 - half


@njit(cache=True, nogil=True)
def _rebalance(t, keys, refs, child, count, inner, parent, j):
    """Refill child ``j`` of ``parent``, which fell below half full after a delete.

    Borrows one entry from the adjacent sibling if it can spare one, else merges the right of
    the two into the left and removes it from ``parent``. Returns the id of the node merged
    away (for the caller to release), or -1 after a borrow.
    """
    half = (keys.shape[1] + 1) // 2
    jr = max(j, 1)  # parent slot of the right node of the pair (the left one is at jr - 1)
    left, right = t.inner_child[parent, jr - 1], t.inner_child[parent, jr]
    if inner:  # the separator moves into the entries (see module docstring)
        keys[right, 0] = t.inner_keys[parent, jr]
        refs[right, 0] = t.inner_refs[parent, jr]
    if j > 0 and count[left] > half:  # last entry of the left sibling to the front
        _shift(keys, refs, child, inner, right, 0, count[right], 1)
        _copy(keys, refs, child, inner, left, count[left] - 1, right, 0)
        count[left] -= 1
        count[right] += 1
    elif j == 0 and count[right] > half:  # first entry of the right sibling to the end
        _copy(keys, refs, child, inner, right, 0, left, count[left])
        _shift(keys, refs, child, inner, right, 1, count[right], -1)
        count[left] += 1
        count[right] -= 1
    else:
        for i in range(count[right]):
            _copy(keys, refs, child, inner, right, i, left, count[left] + i)
        count[left] += count[right]
        _shift(
            t.inner_keys,
            t.inner_refs,
            t.inner_child,
            True,
            parent,
            jr + 1,
            t.inner_count[parent],
            -1,
        )
        t.inner_count[parent] -= 1
        return right
    t.inner_keys[parent, jr] = keys[right, 0]
    t.inner_refs[parent, jr] = refs[right, 0]
    return -1


@njit(cache=True, nogil=True, inline="always")
def _descend(t, root, height, k, r, path_node, path_slot):
    """Leaf whose range holds ``(k, r)``; records the inner nodes and child slots on the way."""
    node = root
    for level in range(height):
        # child j covers [sep_j, sep_{j+1}): find the first separator above (k, r), which
        # is the first one not below (k, r + 1) since refs are integers
        j = (
            _pair_lower_bound(t.inner_keys, t.inner_refs, node, 1, t.inner_count[node], k, r + 1)
            - 1
        )
        path_node[level] = node
        path_slot[level] = j
        node = t.inner_child[node, j]
    return node


# --------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def insert_items(t, keys, refs):
    """Insert items into the lone tree of ``t``: :func:`insert_into` on its
    ``meta[ROOT:HEIGHT + 1]``."""
    insert_into(t, t.meta[ROOT : HEIGHT + 1], keys, refs, new_path(), np.bool_(False))


@njit(cache=True, nogil=True)
def new_path():
    """Scratch for :func:`insert_into`: the inner nodes and child slots of a descent (rows 0
    and 1), and the ring of descents made ahead (:func:`_descend_ahead`)."""
    return np.empty((RING_ROWS, MAX_HEIGHT), dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def seek_leaf(t, root, height, x):
    """The leaf of the tree ``(root, height)`` where the items with key ``>= x`` start (they
    may start at the next leaf on the chain). Touches inner nodes only. O(height · log(fanout)).
    """
    node = root
    for _ in range(height):
        # separators compare on keys alone: children left of the first one >= x hold only
        # keys below x
        j = lower_bound_row(t.inner_keys, node, 1, t.inner_count[node], x) - 1
        node = t.inner_child[node, j]
    return node


#: How many items ahead of the one being inserted :func:`insert_into` fetches the leaf of, in
#: trees with room for at least PREFETCH_ITEMS items (smaller ones stay in cache, and the extra
#: descent would cost more than it saves: measured 10% slower in cache, 20% faster out of it).
INSERT_AHEAD = 4
PREFETCH_ITEMS = 2**16
#: Rows of :func:`new_path`'s scratch: the path (2), each descent ahead's path (2 each), and
#: each descent ahead's leaf and the tree's version when it was made (:func:`_descend_ahead`).
RING_ROWS = 2 + 2 * INSERT_AHEAD + 2


@njit(cache=True, nogil=True, inline="always")
def _fetch_leaf(t, leaf):
    """Prefetch the count, keys and refs of ``leaf`` (its count too: an insert's or a
    delete's first read, a miss of its own in a tree of 2^20 items)."""
    size = t.leaf_keys.shape[1]
    prefetch(t.leaf_count, leaf)
    prefetch_range(t.leaf_keys, leaf * size, leaf * size + size)
    prefetch_range(t.leaf_refs, leaf * size, leaf * size + size)


@njit(cache=True, nogil=True, inline="always")
def _ahead(t):
    """How many items ahead of the one it works on an insert or a delete fetches the leaf
    of: :data:`INSERT_AHEAD` in a tree with room for :data:`PREFETCH_ITEMS` items, else 0."""
    return INSERT_AHEAD if t.meta[LEAF_HWM] * t.leaf_keys.shape[1] >= PREFETCH_ITEMS else 0


@njit(cache=True, nogil=True, inline="always")
def _descend_ahead(t, root, height, k, r, scratch, slot, version):
    """Descend to the leaf of ``(k, r)`` for an item some places on, keep the leaf and the
    path in ring ``slot`` of ``scratch`` (:func:`new_path`) with the tree's ``version``, and
    prefetch the leaf: when the item's turn comes and nothing split, merged or borrowed
    since (the version is the same), its descent is this one."""
    leaf = _descend(t, root, height, k, r, scratch[2 + 2 * slot], scratch[3 + 2 * slot])
    scratch[RING_ROWS - 2, slot] = leaf
    scratch[RING_ROWS - 1, slot] = version
    _fetch_leaf(t, leaf)


@njit(cache=True, nogil=True, inline="always")
def _take_ahead(t, root, height, k, r, scratch, slot, version):
    """The leaf of ``(k, r)``, its path in rows 0 and 1 of ``scratch``: the descent made
    ahead in ring ``slot`` if the tree's ``version`` is still the one it was made at (its
    separators, hence the leaf and the path, are then the same), else a descent now."""
    if scratch[RING_ROWS - 1, slot] == version:
        for level in range(height):
            scratch[0, level] = scratch[2 + 2 * slot, level]
            scratch[1, level] = scratch[3 + 2 * slot, level]
        return scratch[RING_ROWS - 2, slot]
    return _descend(t, root, height, k, r, scratch[0], scratch[1])


@njit_no_refcount
def insert_into(t, top, keys, refs, path, fetched):
    """Insert items one by one (PIM-Tree §2.2.1 step 3), splitting full nodes on the way up.

    ``top``: int64 (2,), the tree's ``(root, height)``, updated when the root splits.
    ``keys`` float64 (b,), ``refs`` int64 (b,), new to the tree; sorted by ``(key, ref)`` the
    descents touch neighbouring leaves in turn. ``path``: scratch from :func:`new_path` (a
    caller inserting many short runs reuses one). ``fetched``: the caller prefetched the
    items' leaves already (then no descent ahead of the inserts): a ``bool``, not a literal
    (``np.bool_(...)``), so that every caller shares one compiled kernel (a literal, or the
    default left out, is a specialisation of its own: a second compile of a few seconds). The
    caller reserves room for the new nodes (:func:`reserve`). O(b · height · log(fanout)).
    """
    fanout = t.inner_keys.shape[1]
    leaf_size = t.leaf_keys.shape[1]
    no_child = path[:0, :0]  # leaf entries have no child column (an empty view, not allocated)
    path_node, path_slot = path[0], path[1]
    b = keys.shape[0]
    # leaves of a large tree are cold: descend for the item some places on and fetch its
    # leaf while this one is inserted; that descent is the item's own when its turn comes,
    # unless a split came between (``version`` counts them)
    ahead = 0 if fetched else _ahead(t)
    version = 0
    for i in range(min(ahead, b)):
        _descend_ahead(t, top[0], top[1], keys[i], refs[i], path, i, version)
    for i in range(b):
        k, r = keys[i], refs[i]
        if ahead:
            leaf = _take_ahead(t, top[0], top[1], k, r, path, i % ahead, version)
            if i + ahead < b:
                j = i + ahead
                _descend_ahead(t, top[0], top[1], keys[j], refs[j], path, i % ahead, version)
        else:
            leaf = _descend(t, top[0], top[1], k, r, path_node, path_slot)
        p = _pair_lower_bound(t.leaf_keys, t.leaf_refs, leaf, 0, t.leaf_count[leaf], k, r)
        if t.leaf_count[leaf] < leaf_size:
            _insert_entry(t.leaf_keys, t.leaf_refs, no_child, t.leaf_count, False, leaf, p, k, r, 0)
            continue
        version += 1  # a split: separators move, the descents made ahead are stale
        new = _alloc(t.meta, LEAF_FREE, LEAF_HWM, t.leaf_next)
        _split_insert(
            t.leaf_keys, t.leaf_refs, no_child, t.leaf_count, False, leaf, new, p, k, r, 0
        )
        t.leaf_next[new] = t.leaf_next[leaf]
        t.leaf_next[leaf] = new
        # the new right node enters its parent after the node it split from
        sk, sr, c = t.leaf_keys[new, 0], t.leaf_refs[new, 0], new
        level = top[1] - 1
        while level >= 0 and t.inner_count[path_node[level]] == fanout:
            node = path_node[level]
            new = _alloc(t.meta, INNER_FREE, INNER_HWM, t.inner_child[:, 0])
            _split_insert(
                t.inner_keys,
                t.inner_refs,
                t.inner_child,
                t.inner_count,
                True,
                node,
                new,
                path_slot[level] + 1,
                sk,
                sr,
                c,
            )
            sk, sr, c = t.inner_keys[new, 0], t.inner_refs[new, 0], new
            level -= 1
        if level >= 0:
            _insert_entry(
                t.inner_keys,
                t.inner_refs,
                t.inner_child,
                t.inner_count,
                True,
                path_node[level],
                path_slot[level] + 1,
                sk,
                sr,
                c,
            )
        else:  # the root split: grow a level
            root = _alloc(t.meta, INNER_FREE, INNER_HWM, t.inner_child[:, 0])
            _put(t.inner_keys, t.inner_refs, t.inner_child, True, root, 0, -np.inf, _NO_REF, top[0])
            _put(t.inner_keys, t.inner_refs, t.inner_child, True, root, 1, sk, sr, c)
            t.inner_count[root] = 2
            top[0] = root
            top[1] += 1


@njit(cache=True, nogil=True)
def delete_items(t, keys, refs):
    """Delete items from the lone tree of ``t`` one by one (PIM-Tree §2.2.1 step 2),
    rebalancing on the way up.

    ``keys`` float64 (b,), ``refs`` int64 (b,): items held by the tree. O(b · height ·
    (log(fanout) + fanout)) (a borrow or merge moves up to a node's worth of entries).
    """
    no_child = np.empty((0, 0), dtype=np.int64)
    half_leaf = (t.leaf_keys.shape[1] + 1) // 2
    half_inner = (t.inner_keys.shape[1] + 1) // 2
    path = new_path()
    path_node, path_slot = path[0], path[1]
    b = keys.shape[0]
    # as insert_into: descend for the item some places on and fetch its leaf while this one
    # is deleted; that descent is the item's own unless a rebalance came between
    ahead = _ahead(t)
    version = 0
    for i in range(min(ahead, b)):
        _descend_ahead(t, t.meta[ROOT], t.meta[HEIGHT], keys[i], refs[i], path, i, version)
    for i in range(b):
        k, r = keys[i], refs[i]
        root, height = t.meta[ROOT], t.meta[HEIGHT]
        if ahead:
            leaf = _take_ahead(t, root, height, k, r, path, i % ahead, version)
            if i + ahead < b:
                j = i + ahead
                _descend_ahead(t, root, height, keys[j], refs[j], path, i % ahead, version)
        else:
            leaf = _descend(t, root, height, k, r, path_node, path_slot)
        p = _pair_lower_bound(t.leaf_keys, t.leaf_refs, leaf, 0, t.leaf_count[leaf], k, r)
        _shift(t.leaf_keys, t.leaf_refs, no_child, False, leaf, p + 1, t.leaf_count[leaf], -1)
        t.leaf_count[leaf] -= 1
        level = t.meta[HEIGHT] - 1
        if level < 0 or t.leaf_count[leaf] >= half_leaf:
            continue
        version += 1  # a borrow or a merge: separators move, the descents ahead are stale
        parent, j = path_node[level], path_slot[level]
        gone = _rebalance(t, t.leaf_keys, t.leaf_refs, no_child, t.leaf_count, False, parent, j)
        if gone < 0:
            continue
        t.leaf_next[t.inner_child[parent, max(j - 1, 0)]] = t.leaf_next[gone]
        _release(t.meta, LEAF_FREE, t.leaf_next, gone)
        # the parent lost an entry; repair inner nodes upwards while they underflow
        while level > 0 and t.inner_count[path_node[level]] < half_inner:
            parent, j = path_node[level - 1], path_slot[level - 1]
            gone = _rebalance(
                t, t.inner_keys, t.inner_refs, t.inner_child, t.inner_count, True, parent, j
            )
            if gone < 0:
                break
            _release(t.meta, INNER_FREE, t.inner_child[:, 0], gone)
            level -= 1
        root = t.meta[ROOT]
        if t.inner_count[root] == 1:  # a root with one child gives way to it
            t.meta[ROOT] = t.inner_child[root, 0]
            t.meta[HEIGHT] -= 1
            _release(t.meta, INNER_FREE, t.inner_child[:, 0], root)


@njit(cache=True, nogil=True, inline="always")
def seek(t, root, height, x):
    """``(leaf, pos)`` of the first item with key ``>= x`` in the tree ``(root, height)``.

    ``pos`` may equal the leaf's count: the item is then the first of a later leaf on the chain
    (or there is none). O(height · log(fanout)).
    """
    node = seek_leaf(t, root, height, x)
    return node, lower_bound_row(t.leaf_keys, node, 0, t.leaf_count[node], x)


@njit(cache=True, nogil=True, inline="always")
def _fetch_inner(t, node):
    """Prefetch inner node ``node``: its count, keys and children."""
    width = t.inner_keys.shape[1]
    prefetch(t.inner_count, node)
    prefetch_range(t.inner_keys, node * width, node * width + width)
    prefetch_range(t.inner_child, node * width, node * width + width)


@njit(cache=True, nogil=True)
def probe_tree(t, keys, lo, hi, min_ref=_NO_REF):
    """Items of the lone tree with ``lo <= item_key - keys[i] <= hi`` and ``ref >= min_ref``.

    One descent to the first key ``>= key + lo`` (widened), then a walk along the leaf chain
    (PIM-Tree §2.2.1 step 1). The descents go :data:`PROBE_GROUP` keys at a time, a level at a
    time, each level's nodes prefetched for the group first; the scans then go key by key, in
    order. ``keys`` float64 (m,). Returns ``(probe_pos, refs)`` int64.
    O(m · height · log(fanout) + items scanned).
    """
    out_p = np.empty(64, dtype=np.int64)
    out_r = np.empty(64, dtype=np.int64)
    n = 0
    root, height = t.meta[ROOT], t.meta[HEIGHT]
    at = np.empty(PROBE_GROUP, dtype=np.int64)  # each key's node on the way down
    m = keys.shape[0]
    for g0 in range(0, m, PROBE_GROUP):
        gm = min(PROBE_GROUP, m - g0)
        for g in range(gm):
            at[g] = root
        for _ in range(height):
            for g in range(gm):
                _fetch_inner(t, at[g])
            for g in range(gm):
                vlo, _ = key_range(keys[g0 + g], lo, hi)
                node = at[g]
                j = lower_bound_row(t.inner_keys, node, 1, t.inner_count[node], vlo) - 1
                at[g] = t.inner_child[node, j]
        for g in range(gm):
            _fetch_leaf(t, at[g])
        for g in range(gm):
            i = g0 + g
            key = keys[i]
            vlo, vhi = key_range(key, lo, hi)
            first = at[g]
            p0 = lower_bound_row(t.leaf_keys, first, 0, t.leaf_count[first], vlo)
            n_key = n
            while True:  # again into grown outputs if the key's matches did not fit
                n, leaf, p, done = n_key, first, p0, False
                while not done and leaf >= 0:
                    n, done = scan_run(
                        t.leaf_keys[leaf],
                        t.leaf_refs[leaf],
                        p,
                        t.leaf_count[leaf],
                        key,
                        lo,
                        hi,
                        vhi,
                        min_ref,
                        i,
                        out_p,
                        out_r,
                        n,
                    )
                    leaf = t.leaf_next[leaf]
                    p = 0
                if n <= out_p.shape[0]:
                    break
                out_p, out_r = grow(out_p, n), grow(out_r, n)
    return out_p[:n], out_r[:n]


@njit(cache=True, nogil=True)
def chain_items(t, leaf, n):
    """The ``n`` items on the leaf chain from ``leaf`` on, as a sorted run ``(keys, refs)``.

    O(n + leaves visited).
    """
    keys = np.empty(n, dtype=np.float64)
    refs = np.empty(n, dtype=np.int64)
    k = 0
    while k < n:
        for j in range(t.leaf_count[leaf]):  # (a slice assignment compiles numpy's
            keys[k] = t.leaf_keys[leaf, j]  # broadcast and its error message: a second of
            refs[k] = t.leaf_refs[leaf, j]  # a first run's compiling)
            k += 1
        leaf = t.leaf_next[leaf]
    return keys, refs


# --------------------------------------------------------------------------------------------
# Capacity and forests
# --------------------------------------------------------------------------------------------

_LEAF_ARRAYS = ("leaf_keys", "leaf_refs", "leaf_count", "leaf_next")
_INNER_ARRAYS = ("inner_keys", "inner_refs", "inner_child", "inner_count")


def _grow(t: BPlusArrays, leaves: int, inners: int) -> BPlusArrays:
    """``t`` with room for ``leaves`` leaves and ``inners`` inner nodes (capacities double)."""
    grown = {}
    for names, need in ((_LEAF_ARRAYS, leaves), (_INNER_ARRAYS, inners)):
        cap = len(getattr(t, names[0]))
        if cap >= need:
            continue
        while cap < need:
            cap *= 2
        for name in names:
            old = getattr(t, name)
            arr = np.empty((cap, *old.shape[1:]), dtype=old.dtype)
            arr[: len(old)] = old
            grown[name] = arr
    return t._replace(**grown) if grown else t


def reserve(t: BPlusArrays, n_items: int, n_new: int, n_trees: int = 1) -> BPlusArrays:
    """``t`` with room for the nodes needed to insert ``n_new`` items, ``n_items`` in all.

    Each insert splits at most one leaf, and non-root leaves hold at least
    ``(leaf_size + 1) // 2`` items, so ``min(leaf high-water mark + n_new,
    n_trees - 1 + n_items // half)`` leaves suffice (at least one per tree). A tree of L leaves
    whose root has >= 2 children and other inner nodes >= c has at most
    ``(L + c - 3) / (c - 1)`` inner nodes; one more per tree covers rounding. Node ids stay
    valid: arrays only grow.
    """
    bound = n_trees - 1 + max(1, n_items // ((t.leaf_keys.shape[1] + 1) // 2))
    leaves = min(int(t.meta[LEAF_HWM]) + n_new, bound)
    c = (t.inner_keys.shape[1] + 1) // 2
    inners = -(-(bound + n_trees * (c - 3)) // (c - 1)) + 2 * n_trees - 1
    return _grow(t, leaves, inners)


def shrink_to_fit(t: BPlusArrays) -> BPlusArrays:
    """A copy of ``t`` whose node arrays end at the high-water marks (for a tree that is done
    growing: the doubling slack is given back). O(nodes)."""
    hwm = {_LEAF_ARRAYS: int(t.meta[LEAF_HWM]), _INNER_ARRAYS: int(t.meta[INNER_HWM])}
    return t._replace(
        **{name: getattr(t, name)[:n].copy() for names, n in hwm.items() for name in names}
    )


def new_forest(
    n_trees: int, fanout: int, leaf_size: int, reuse: BPlusArrays | None = None
) -> tuple[BPlusArrays, np.ndarray]:
    """``n_trees`` empty trees over shared node arrays, their root leaves chained in order.

    Tree ``p``'s root is leaf ``p``, which stays its first leaf (splits keep the left node).
    ``reuse``: old arrays to clear and keep (their capacity saves regrowing). Returns
    ``(t, tops)`` with ``tops`` int64 ``(n_trees, 2)``: each tree's ``(root, height)``.
    O(n_trees).
    """
    t = _grow(reuse if reuse is not None else new_tree(fanout, leaf_size, 16, 16), n_trees, 0)
    t.meta[:] = 0
    t.meta[LEAF_HWM] = n_trees
    t.meta[LEAF_FREE] = t.meta[INNER_FREE] = -1
    t.leaf_count[:n_trees] = 0
    t.leaf_next[:n_trees] = np.arange(1, n_trees + 1)
    t.leaf_next[n_trees - 1] = -1
    tops = np.zeros((n_trees, 2), dtype=np.int64)
    tops[:, 0] = np.arange(n_trees)
    return t, tops


def check_forest(t: BPlusArrays, tops: np.ndarray) -> list[list[tuple[float, int]]]:
    """Assert the invariants of the trees ``tops`` (rows ``(root, height)``) over ``t``.

    Every tree is a valid B+-tree whose first leaf is leaf ``p`` (its row in ``tops``), the leaf
    chain from leaf 0 lists the trees' leaves in order, once each, and every node of ``t`` is
    used once or free. Returns each tree's items in order. O(nodes).
    """
    fanout, size = t.inner_keys.shape[1], t.leaf_keys.shape[1]
    half_leaf, half_inner = (size + 1) // 2, (fanout + 1) // 2
    leaves: list[int] = []
    inners: list[int] = []

    def visit(node: int, depth: int, height: int, lo: tuple, hi: tuple) -> None:
        """Check the subtree of ``node``, whose items must lie in ``[lo, hi)``."""
        is_root = depth == 0
        if depth == height:
            leaves.append(node)
            c = int(t.leaf_count[node])
            assert (0 if is_root else half_leaf) <= c <= size, f"leaf {node} holds {c}"
            items = list(
                zip(t.leaf_keys[node, :c].tolist(), t.leaf_refs[node, :c].tolist(), strict=True)
            )
            assert items == sorted(set(items)), f"leaf {node} not strictly ascending"
            assert not items or (lo <= items[0] and items[-1] < hi), f"leaf {node} bounds"
            return
        inners.append(node)
        c = int(t.inner_count[node])
        assert (2 if is_root else half_inner) <= c <= fanout, f"inner {node} has {c} children"
        seps = list(
            zip(t.inner_keys[node, 1:c].tolist(), t.inner_refs[node, 1:c].tolist(), strict=True)
        )
        bounds = [lo, *seps, hi]
        assert all(a < b for a, b in pairwise(bounds)), f"inner {node} separators"
        for j in range(c):
            visit(int(t.inner_child[node, j]), depth + 1, height, bounds[j], bounds[j + 1])

    items = []
    for p, (root, height) in enumerate(tops.tolist()):
        first = len(leaves)
        # bounds below and above every (key, ref) item, +-inf keys included
        visit(root, 0, height, (-np.inf, _NO_REF), (np.inf, np.inf))
        assert leaves[first] == p, f"leaf {p} heads tree {p}"
        items.append(
            [
                (float(t.leaf_keys[n, j]), int(t.leaf_refs[n, j]))
                for n in leaves[first:]
                for j in range(int(t.leaf_count[n]))
            ]
        )
    chain: list[int] = []
    leaf = 0
    while leaf >= 0 and len(chain) <= len(leaves):
        chain.append(leaf)
        leaf = int(t.leaf_next[leaf])
    assert chain == leaves, "the leaf chain lists the leaves in key order, once each"

    for used, hwm_slot, free_slot, link in (
        (leaves, LEAF_HWM, LEAF_FREE, t.leaf_next),
        (inners, INNER_HWM, INNER_FREE, t.inner_child[:, 0]),
    ):
        hwm = int(t.meta[hwm_slot])
        unused: list[int] = []
        node = int(t.meta[free_slot])
        while node >= 0 and len(unused) <= hwm:
            unused.append(node)
            node = int(link[node])
        assert sorted(used + unused) == list(range(hwm)), "nodes are used or free, once"
    return items


# --------------------------------------------------------------------------------------------
# Window index
# --------------------------------------------------------------------------------------------


@register
class BPlusTreeIndex(WindowIndex):
    """Mutable B+-tree on the primary key with exact, item-by-item expiry.

    Complexity (n items, height ≈ log_{fanout/2}(n / leaf_size)): ``insert`` of b items
    O(b log b + b · height · log(fanout)) (sorted first for locality); ``probe`` of m keys
    O(m · height · log(fanout) + items scanned); ``expire`` of e items
    O(e log e + e · height · fanout). Memory: 16 bytes per leaf slot, and leaves are at least
    half full (at most 32 bytes per item, about 23 in practice); the insertion log, 16 bytes
    per item; inner nodes, at most about ``96 / leaf_size`` bytes per item. Capacities grow by
    doubling (measured: 68 bytes per item at 2**20 items with the defaults).

    Parameters
    ----------
    n_keys : int
        Must be 1.
    fanout : int
        Maximum children per inner node, >= 3.
    leaf_size : int
        Maximum items per leaf, >= 3.
    """

    name = "bplus_tree"
    takes_order = True

    def __init__(
        self,
        n_keys: int = 1,
        fanout: int = DEFAULT_SHAPE.fanout,
        leaf_size: int = DEFAULT_SHAPE.leaf_size,
    ) -> None:
        super().__init__(n_keys)
        self.fanout = node_size(self.name, "fanout", fanout, 3)
        self.leaf_size = node_size(self.name, "leaf_size", leaf_size, 3)
        self._tree = new_tree(self.fanout, self.leaf_size, 16, 16)
        self._log_keys = np.empty(16, dtype=np.float64)
        self._log_refs = np.empty(16, dtype=np.int64)
        self._head = 0
        self._tail = 0

    def _log(self, keys: np.ndarray, refs: np.ndarray) -> None:
        """Append to the insertion log, compacting it when full.

        Compaction moves the live items to the front, into arrays twice as large if they would
        be more than half full, so its copying is amortised O(1) per item; moving in place
        reuses memory already touched (fresh arrays cost a page fault per 4 KiB), and a log
        at most half full never overlaps its new place.
        """
        n = len(refs)
        if self._tail + n > len(self._log_refs):
            live = self._tail - self._head
            cap = len(self._log_refs)
            h, t = self._head, self._tail
            if live + n <= cap // 2:
                self._log_keys[:live] = self._log_keys[h:t]
                self._log_refs[:live] = self._log_refs[h:t]
            else:
                while live + n > cap // 2:
                    cap *= 2
                log_keys, log_refs = np.empty(cap), np.empty(cap, dtype=np.int64)
                log_keys[:live] = self._log_keys[h:t]
                log_refs[:live] = self._log_refs[h:t]
                self._log_keys, self._log_refs = log_keys, log_refs
            self._head, self._tail = 0, live
        self._log_keys[self._tail : self._tail + n] = keys
        self._log_refs[self._tail : self._tail + n] = refs
        self._tail += n

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        if len(refs) == 0:
            return
        self._log(keys[0], refs)
        self._tree = reserve(self._tree, len(self), len(refs))
        # a stable sort keeps equal keys in ref order: the batch arrives in (key, ref) order
        order = stable_key_order(keys[0], order)
        if order is None:
            insert_items(self._tree, np.ascontiguousarray(keys[0]), refs)
        else:
            insert_items(self._tree, keys[0][order], refs[order])

    def probe(self, keys, lo, hi):
        return probe_tree(self._tree, np.ascontiguousarray(keys[0]), lo[0], hi[0])

    def expire(self, before_ref: int) -> None:
        live = self._log_refs[self._head : self._tail]
        n = int(np.searchsorted(live, before_ref, side="left"))
        if n == 0:
            return
        keys = self._log_keys[self._head : self._head + n]
        order = stable_order(keys)  # the log is in ref order
        delete_items(self._tree, keys[order], live[:n][order])
        self._head += n

    def __len__(self) -> int:
        return self._tail - self._head

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._tree) + self._log_keys.nbytes + self._log_refs.nbytes

    def check(self) -> None:
        t = self._tree
        (held,) = check_forest(t, t.meta[None, ROOT : HEIGHT + 1])
        h, e = self._head, self._tail
        log_refs = self._log_refs[h:e]
        assert np.all(np.diff(log_refs) > 0), "log refs strictly increasing"
        assert held == sorted(zip(self._log_keys[h:e].tolist(), log_refs.tolist(), strict=True)), (
            "the tree holds exactly the logged items"
        )
