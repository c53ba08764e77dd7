"""``wib_tree``: PanJoin's Wide B+-Tree (§III-C) in a chain of subwindows.

A B+-tree whose inner nodes are small and sorted (``fanout`` children, ``fanout - 1``
separators, cache resident) and whose leaves are wide and unsorted: a leaf is a chain of LLAT
entries of ``leaf_width`` items (:mod:`~streamjoin.indexes.panjoin.llat`), sorted only when it splits,
which costs O(W log W) once per W inserts instead of O(W) per insert (§III-C). Child ``j`` of an
inner node holds the keys in ``[sep[j-1], sep[j])``; no two separators are equal, so all items
with one key live in one leaf (§III-C), and a leaf full of one key grows by chaining LLAT
entries instead of splitting. Leaves are linked in key order for range scans.

Leaves come in two kinds:

- *regular*: one entry, at most ``leaf_width`` items;
- *equal-key*: every item has the same key ``y``, in a chain of any length.

A full regular leaf is sorted and split around its median key ``y``: when ``y`` fills more than
half the leaf, its run becomes an equal-key leaf whose range is cut to ``[y, nextafter(y))``
by the separators ``y`` and ``nextafter(y)`` (only where keys lie on that side), else the leaf
splits in two at the key boundary nearest its middle (both halves keep at least a quarter). An
equal-key leaf receiving another key splits that key's side of its range off into a new
regular leaf. So equal-key leaves are never sorted again, and a sort of W items is followed by
at least W/4 inserts into the halves before they can split again.

Batch mode (§III-E): each sorted key descends from the path of the previous key, backtracking
only as far up as needed; probes then sweep the leaves
(:func:`~streamjoin.indexes.panjoin.llat.scan_partitions`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import node_size, register
from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.blocks.key_codes import bounds_for, encode, item_codes, item_refs
from streamjoin.indexes.panjoin.llat import (
    PTR_G,
    Chains,
    LLATStore,
    SweptProbes,
    chain_entries,
    grown_llat,
    llat_append,
    new_llat,
    scan_partitions,
    take_entry,
)
from streamjoin.indexes.panjoin.subwindows import SubwindowIndex, rebound_search
from streamjoin.modes import Layout

# slots of WiBArrays.meta
LEAVES, INNERS, ROOT, HEIGHT = range(4)
#: Path buffer length: inner nodes have >= 2 children, so a tree of 2**64 leaves fits.
MAX_HEIGHT = 64


class WiBArrays(NamedTuple):
    """Tree of one WiB+-Tree subwindow; its items live in an LLAT."""

    #: float64 (inner_cap, fanout - 1): separators, strictly ascending, ``count - 1`` in use
    inner_keys: np.ndarray
    #: int64 (inner_cap, fanout): children (leaves below the last inner level)
    inner_child: np.ndarray
    #: int64 (inner_cap,): children per inner node
    inner_count: np.ndarray
    #: int64 (leaf_cap,): first LLAT entry of each leaf
    leaf_head: np.ndarray
    #: int64 (leaf_cap,): last LLAT entry of each leaf
    leaf_tail: np.ndarray
    #: int64 (leaf_cap,): next leaf in key order, -1 after the last
    leaf_next: np.ndarray
    #: float64 (leaf_cap,): upper end of each leaf's key range (the next separator, or +inf)
    leaf_high: np.ndarray
    #: bool (leaf_cap,): equal-key leaf
    leaf_equal: np.ndarray
    #: int64 (4,): leaves and inner nodes handed out, root id, height (0: the root is a leaf)
    meta: np.ndarray


def new_tree(leaves: int, inners: int, fanout: int) -> WiBArrays:
    """A tree of one empty regular leaf (leaf 0, which will take LLAT entry 0)."""
    t = WiBArrays(
        np.empty((inners, fanout - 1)),
        np.empty((inners, fanout), dtype=np.int64),
        np.empty(inners, dtype=np.int64),
        np.zeros(leaves, dtype=np.int64),
        np.zeros(leaves, dtype=np.int64),
        np.full(leaves, -1, dtype=np.int64),
        np.full(leaves, np.inf),
        np.zeros(leaves, dtype=np.bool_),
        np.zeros(4, dtype=np.int64),
    )
    t.meta[LEAVES] = 1
    return t


# --------------------------------------------------------------------------------------------
# Descent and inner nodes
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _new_path():
    """Buffers for a root-to-leaf path: inner node, child slot taken, and the node's key range
    ``[lo, hi)`` at each level."""
    return (
        np.empty(MAX_HEIGHT, dtype=np.int64),
        np.empty(MAX_HEIGHT, dtype=np.int64),
        np.empty(MAX_HEIGHT),
        np.empty(MAX_HEIGHT),
    )


@njit(cache=True, nogil=True)
def _descend(t, x, path, valid):
    """The leaf whose range holds ``x``, recording the path.

    §III-E: the first ``valid`` levels of ``path`` hold the previous descent; it backtracks to
    the deepest of those nodes whose range holds ``x`` and descends from there, starting that
    node's search at the previous slot. Returns ``(leaf, valid levels of path)``.
    O(levels re-descended · log(fanout)).
    """
    node_at, slot_at, lo_at, hi_at = path
    height = t.meta[HEIGHT]
    if height == 0:
        return t.meta[ROOT], 0
    if valid == 0:
        level, hint = 0, 0
        node_at[0] = t.meta[ROOT]
        lo_at[0] = -np.inf
        hi_at[0] = np.inf
    else:
        level = valid - 1
        while level > 0 and not (lo_at[level] <= x < hi_at[level]):
            level -= 1
        hint = slot_at[level]
    while True:
        node = node_at[level]
        c = t.inner_count[node]
        j = rebound_search(t.inner_keys[node], 0, c - 1, hint, x, True)
        slot_at[level] = j
        child = t.inner_child[node, j]
        if level + 1 == height:
            return child, height
        lo_at[level + 1] = t.inner_keys[node, j - 1] if j > 0 else lo_at[level]
        hi_at[level + 1] = t.inner_keys[node, j] if j < c - 1 else hi_at[level]
        node_at[level + 1] = child
        level += 1
        hint = 0


@njit(cache=True, nogil=True)
def _insert_child(t, node, slot, key, child):
    """Put ``child`` at ``slot`` (>= 1) of a node with room, with separator ``key`` before it."""
    c = t.inner_count[node]
    for q in range(c - 1, slot - 1, -1):
        t.inner_child[node, q + 1] = t.inner_child[node, q]
    for q in range(c - 2, slot - 2, -1):
        t.inner_keys[node, q + 1] = t.inner_keys[node, q]
    t.inner_child[node, slot] = child
    t.inner_keys[node, slot - 1] = key
    t.inner_count[node] = c + 1


@njit(cache=True, nogil=True)
def _split_inner(t, node, slot, key, child):
    """Insert ``child`` at ``slot`` of the full ``node`` and move the upper half to a new node.

    Of the ``fanout + 1`` children the left node keeps ``(fanout + 1) // 2``; the separator
    between the halves moves up. Returns ``(separator, new node)``.
    """
    fanout = t.inner_child.shape[1]
    kids = np.empty(fanout + 1, dtype=np.int64)
    seps = np.empty(fanout)
    for q in range(fanout + 1):
        kids[q] = child if q == slot else t.inner_child[node, q - 1 if q > slot else q]
    for q in range(fanout):
        seps[q] = key if q == slot - 1 else t.inner_keys[node, q - 1 if q > slot - 1 else q]
    half = (fanout + 1) // 2
    new = t.meta[INNERS]
    t.meta[INNERS] = new + 1
    t.inner_child[node, :half] = kids[:half]
    t.inner_keys[node, : half - 1] = seps[: half - 1]
    t.inner_count[node] = half
    t.inner_child[new, : fanout + 1 - half] = kids[half:]
    t.inner_keys[new, : fanout - half] = seps[half:]
    t.inner_count[new] = fanout + 1 - half
    return seps[half - 1], new


@njit(cache=True, nogil=True)
def _add_leaf(t, sep, new, path):
    """Link leaf ``new`` right after the leaf whose range holds ``sep``; ``new`` takes the part
    of that range from ``sep`` on. ``sep`` must not be a separator yet. Splits full inner nodes
    upwards and grows a new root when the root splits. O(height · fanout)."""
    node_at, slot_at, _, _ = path
    leaf, height = _descend(t, sep, path, 0)
    t.leaf_next[new] = t.leaf_next[leaf]
    t.leaf_next[leaf] = new
    t.leaf_high[new] = t.leaf_high[leaf]
    t.leaf_high[leaf] = sep
    key, child = sep, new
    for level in range(height - 1, -1, -1):
        node, slot = node_at[level], slot_at[level] + 1
        if t.inner_count[node] < t.inner_child.shape[1]:
            _insert_child(t, node, slot, key, child)
            return
        key, child = _split_inner(t, node, slot, key, child)
    root = t.meta[INNERS]
    t.meta[INNERS] = root + 1
    t.inner_keys[root, 0] = key
    t.inner_child[root, 0] = t.meta[ROOT]
    t.inner_child[root, 1] = child
    t.inner_count[root] = 2
    t.meta[ROOT] = root
    t.meta[HEIGHT] = height + 1


# --------------------------------------------------------------------------------------------
# Leaves
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _new_leaf(t, llat, equal):
    """A leaf with one fresh LLAT entry; ``_add_leaf`` links it into the tree."""
    leaf = t.meta[LEAVES]
    t.meta[LEAVES] = leaf + 1
    g = take_entry(llat)
    t.leaf_head[leaf] = g
    t.leaf_tail[leaf] = g
    t.leaf_equal[leaf] = equal
    return leaf


@njit(cache=True, nogil=True)
def _fill_entry(llat, e, keys, refs, start, stop):
    n = stop - start
    llat.keys[e, :n] = keys[start:stop]
    llat.refs[e, :n] = refs[start:stop]
    llat.fill[e] = n


@njit(cache=True, nogil=True)
def _split_leaf(t, llat, leaf, path):
    """Sort the full regular ``leaf`` and split it around its median key (module docstring).

    §III-C sorts a leaf only here. O(W log W + height · fanout).
    """
    e = t.leaf_head[leaf]
    width = llat.keys.shape[1]
    order = np.argsort(llat.keys[e], kind="mergesort")
    keys = llat.keys[e][order]
    refs = llat.refs[e][order]
    mid = width // 2
    y = keys[mid]
    s = rebound_search(keys, 0, width, mid, y, False)  # the run of y is [s, f)
    f = rebound_search(keys, s, width, mid, y, True)
    if 2 * (f - s) > width:  # y dominates: isolate its run as an equal-key leaf
        if f < width:
            right = _new_leaf(t, llat, False)
            _fill_entry(llat, t.leaf_head[right], keys, refs, f, width)
            _add_leaf(t, np.nextafter(y, np.inf), right, path)
        if s > 0:
            run = _new_leaf(t, llat, True)
            _fill_entry(llat, t.leaf_head[run], keys, refs, s, f)
            _add_leaf(t, y, run, path)
            _fill_entry(llat, e, keys, refs, 0, s)
        else:
            _fill_entry(llat, e, keys, refs, s, f)
            t.leaf_equal[leaf] = True
    else:  # cut at the run boundary nearer the middle: both halves get >= W/4 items
        p = s if s > 0 and (f == width or mid - s <= f - mid) else f
        right = _new_leaf(t, llat, False)
        _fill_entry(llat, t.leaf_head[right], keys, refs, p, width)
        _add_leaf(t, keys[p], right, path)
        _fill_entry(llat, e, keys, refs, 0, p)


@njit(cache=True, nogil=True)
def _split_off(t, llat, leaf, k, y, path):
    """Give key ``k`` != ``y`` of equal-key ``leaf`` a new, empty regular leaf: the leaf's range
    below ``y``, or from ``nextafter(y)`` up. At most twice per equal-key leaf. O(height ·
    fanout)."""
    other = _new_leaf(t, llat, False)
    if k > y:
        _add_leaf(t, np.nextafter(y, np.inf), other, path)
        return
    _add_leaf(t, y, other, path)  # `other` now covers [y, ...): hand it the run
    head, tail = t.leaf_head[leaf], t.leaf_tail[leaf]
    t.leaf_head[leaf] = t.leaf_head[other]
    t.leaf_tail[leaf] = t.leaf_tail[other]
    t.leaf_head[other] = head
    t.leaf_tail[other] = tail
    t.leaf_equal[leaf] = False
    t.leaf_equal[other] = True


@njit(cache=True, nogil=True)
def short_of_room(t, llat):
    """Whether inserting one more item could run out of ``(entries, leaves, inner nodes)``.

    One item causes at most two leaf creations (a split isolating a run on both sides, or a
    one-sided isolation and then a split-off), each taking an entry and adding a separator,
    which splits at most every inner level and adds a root: 2 entries, 2 leaves and
    ``2 · (height + 2)`` inner nodes.
    """
    return (
        llat.keys.shape[0] - llat.meta[PTR_G] < 2,
        t.leaf_head.shape[0] - t.meta[LEAVES] < 2,
        t.inner_count.shape[0] - t.meta[INNERS] < 2 * (t.meta[HEIGHT] + 2),
    )


@njit(cache=True, nogil=True)
def insert_wib_tree(t, llat, keys, refs, start):
    """Insert sorted items from position ``start`` on, one by one, with path reuse (§III-E).

    Stops early when :func:`short_of_room` says the arrays must grow; returns the position of
    the first item not inserted. ``keys`` float64 (n,) ascending, ``refs`` int64 (n,).
    O(n · log(fanout) · levels re-descended) plus the splits, O(log W) amortised per item.
    """
    width = llat.keys.shape[1]
    path = _new_path()
    valid = 0
    for i in range(start, keys.shape[0]):
        entries_short, leaves_short, inners_short = short_of_room(t, llat)
        if entries_short or leaves_short or inners_short:
            return i
        k, r = keys[i], refs[i]
        while True:
            leaf, valid = _descend(t, k, path, valid)
            if t.leaf_equal[leaf]:
                y = llat.keys[t.leaf_head[leaf], 0]
                if k == y:
                    llat_append(llat, t.leaf_tail, leaf, k, r)
                    break
                _split_off(t, llat, leaf, k, y, path)
            elif llat.fill[t.leaf_tail[leaf]] < width:
                llat_append(llat, t.leaf_tail, leaf, k, r)
                break
            else:
                _split_leaf(t, llat, leaf, path)
            valid = 0  # the structural change reused the path buffers
    return keys.shape[0]


@njit(cache=True, nogil=True)
def probe_wib_tree(t, llat, coder, ref_base, keys, vlo, vhi, lo, hi, min_ref):
    """Items of a WiB+-Tree subwindow with ``lo <= item - keys[i] <= hi`` and
    ``ref >= min_ref`` -- a superset of them, in code, from a packed subwindow (``coder``:
    its code's ``(base, scale)``, refs counted from ``ref_base``).

    Each sorted probe finds the leaf of ``vlo[i]`` by a descent reusing the previous path
    (§III-E: the separators stay float64); then the leaf sweep. ``keys``/``vlo``/``vhi``
    float64 (m,). Returns ``(i, refs)`` int64. O(m · height · log(fanout) + leaves visited +
    items scanned · log(active probes) + matches).
    """
    path = _new_path()
    valid = 0
    start = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        leaf, valid = _descend(t, vlo[i], path, valid)
        start[i] = leaf
    ilo, ihi = bounds_for(llat.keys, vlo, vhi, coder)
    return scan_partitions(
        llat,
        Chains(t.leaf_high, t.leaf_next, t.leaf_head),
        SweptProbes(keys, vlo, vhi, ilo, ihi, start),
        ref_base,
        lo,
        hi,
        min_ref,
    )


def _grown(arr: np.ndarray, rows: int) -> np.ndarray:
    out = np.empty((rows, *arr.shape[1:]), dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


class WiBTree(LLATStore):
    """One WiB+-Tree subwindow (see the module docstring).

    Complexity: ``insert`` of n sorted items O(n · log(fanout) · levels re-descended + n log W)
    amortised (splits); ``probe`` of m sorted keys O(m · height · log(fanout) + leaves visited
    + their items · log(active probes) + matches). Arrays grow by doubling. Memory: LLAT
    entries of ``16 W`` bytes (``8 W`` once packed), one per leaf plus the overflow of
    equal-key leaves (leaves are at least a quarter full but for those created small by run
    isolation), and ``16 · fanout`` bytes per inner node.

    Parameters
    ----------
    capacity : int
        Items per subwindow ``N_Sub`` (sizes the initial arrays).
    leaf_width : int
        Items per leaf entry ``W``, >= 2.
    fanout : int
        Children per inner node, >= 3 (§III-C: 64 keys fit in a few cache lines).
    layout : str
        ``"wide"`` (default): a float64 key and an int64 ref per item, exact probes.
        ``"compact"``: the insert that fills the subwindow packs its LLAT in place into 8-byte
        items, coded from its own keys, as :class:`~streamjoin.indexes.panjoin.rap_table.RaPTable`
        does (a full subwindow's leaves never split again, so their items stop moving); the
        inner nodes keep float64 separators. Probes of a packed subwindow return a superset
        the caller refines. A subwindow still filling, or of ``capacity >= 2**32``, stays wide.
    """

    kind = "wib_tree"
    _t: WiBArrays

    def __init__(
        self, capacity: int, leaf_width: int = 128, fanout: int = 64, layout: Layout = "wide"
    ) -> None:
        super().__init__(capacity)
        self.leaf_width = node_size(self.kind, "leaf_width", leaf_width, 2)
        self.fanout = node_size(self.kind, "fanout", fanout, 3)
        self._set_layout(layout)
        self._coder = np.full(2, np.nan)  # the code's (base, scale) once packed
        self._ref_base = np.zeros(1, dtype=np.int64)
        leaves = max(4, 2 * math.ceil(capacity / self.leaf_width))
        self._llat = new_llat(leaves, self.leaf_width, 1)  # entry 0 belongs to leaf 0
        self._t = new_tree(leaves, max(8, 4 * leaves // self.fanout), self.fanout)
        self._size = 0

    def successor(self) -> WiBTree:
        return WiBTree(self.capacity, self.leaf_width, self.fanout, self.layout)

    def _reserve(self) -> None:
        """Grow whatever :func:`short_of_room` reports, by doubling."""
        while True:
            entries, leaves, inners = short_of_room(self._t, self._llat)
            if not (entries or leaves or inners):
                return
            t = self._t
            if entries:
                self._llat = grown_llat(self._llat, 2 * len(self._llat.fill))
            if leaves:
                cap = 2 * len(t.leaf_head)
                t = t._replace(
                    **{
                        f: _grown(getattr(t, f), cap)
                        for f in WiBArrays._fields
                        if f.startswith("leaf_")
                    }
                )
            if inners:
                cap = 2 * len(t.inner_count)
                t = t._replace(
                    **{
                        f: _grown(getattr(t, f), cap)
                        for f in WiBArrays._fields
                        if f.startswith("inner_")
                    }
                )
            self._t = t

    def insert(self, keys, refs):
        if len(refs) == 0:
            return
        self._before_insert(refs, self._ref_base)
        done = 0
        while done < len(refs):
            self._reserve()
            done = insert_wib_tree(self._t, self._llat, keys, refs, done)
        self._size += len(refs)
        self._after_insert(self._coder, self._ref_base)

    def probe(self, keys, vlo, vhi, lo, hi, min_ref):
        return probe_wib_tree(*self.kernel_state(), keys, vlo, vhi, lo, hi, min_ref)

    def kernel_state(self) -> tuple:
        """The arguments :func:`probe_wib_tree` takes before the probe keys."""
        return self._t, self._llat, self._coder, self._ref_base[0]

    def _leaves_in_order(self) -> list[int]:
        leaves: list[int] = []
        leaf = 0
        while leaf >= 0 and len(leaves) <= self._t.meta[LEAVES]:
            leaves.append(leaf)
            leaf = int(self._t.leaf_next[leaf])
        return leaves

    def items(self):
        """``(keys, refs)``; a compact subwindow's keys are its items' codes (float64)."""
        llat, t = self._llat, self._t
        entries = [
            e for leaf in self._leaves_in_order() for e in chain_entries(llat, t.leaf_head[leaf])
        ]
        keys = np.concatenate([llat.keys[e, : llat.fill[e]] for e in entries])
        if self.compact:
            return item_codes(keys).astype(np.float64), item_refs(keys, int(self._ref_base[0]))
        return keys, np.concatenate([llat.refs[e, : llat.fill[e]] for e in entries])

    def check(self) -> None:
        t, llat = self._t, self._llat
        width, fanout = self.leaf_width, self.fanout
        n_leaves, n_inners, height = int(t.meta[LEAVES]), int(t.meta[INNERS]), int(t.meta[HEIGHT])
        leaves, inners, ranges = [], [], []

        def visit(node: int, depth: int, lo: float, hi: float) -> None:
            """Collect leaves in key order with their ranges [lo, hi) ([lo, +inf] at the end)."""
            if depth == height:
                leaves.append(node)
                ranges.append((lo, hi))
                return
            inners.append(node)
            c = int(t.inner_count[node])
            assert (2 if depth == 0 else (fanout + 1) // 2) <= c <= fanout, f"inner {node}: {c}"
            seps = t.inner_keys[node, : c - 1].tolist()
            bounds = [lo, *seps, hi]
            assert all(a < b for a, b in zip(bounds[:-2], bounds[1:-1], strict=True)), (
                f"inner {node}: separators strictly ascending within the node's range"
            )
            assert not seps or seps[-1] < hi or hi == np.inf, f"inner {node}: separator range"
            for j in range(c):
                visit(int(t.inner_child[node, j]), depth + 1, bounds[j], bounds[j + 1])

        visit(int(t.meta[ROOT]), 0, -np.inf, np.inf)
        assert sorted(inners) == list(range(n_inners)), "inner nodes used once each"
        assert sorted(leaves) == list(range(n_leaves)), "leaves used once each"
        assert leaves == self._leaves_in_order(), "the leaf chain lists the leaves in key order"
        entries, size = [], 0
        for leaf, (lo, hi) in zip(leaves, ranges, strict=True):
            assert t.leaf_high[leaf] == hi, f"leaf {leaf}: high is its range's upper end"
            chain = chain_entries(llat, t.leaf_head[leaf])
            entries += chain
            assert chain[-1] == t.leaf_tail[leaf], f"leaf {leaf}: tail is the chain's last entry"
            assert all(llat.fill[e] == width for e in chain[:-1]), f"leaf {leaf}: full links"
            keys = np.concatenate([llat.keys[e, : llat.fill[e]] for e in chain])
            size += len(keys)
            if self.compact:  # codes, monotone in the keys: within the codes of the range
                keys = item_codes(keys)
                lo, hi = (int(encode(x, *self._coder)) for x in (lo, hi))
                assert np.all((keys >= lo) & (keys <= hi)), f"leaf {leaf}: codes in range"
            else:
                assert np.all(keys >= lo) and np.all((keys < hi) | (hi == np.inf)), (
                    f"leaf {leaf}: keys within [{lo}, {hi})"
                )
            if t.leaf_equal[leaf]:
                assert len(keys) and np.all(keys == keys[0]), f"equal-key leaf {leaf}: one key"
            else:
                assert len(chain) == 1, f"regular leaf {leaf}: one entry"
        assert sorted(entries) == list(range(int(llat.meta[PTR_G]))), "LLAT entries used once"
        assert size == self._size <= self.capacity
        assert len(np.unique(self.items()[1])) == self._size, "refs unique (decoded, if packed)"


@register
class WiBTreeIndex(SubwindowIndex):
    """PanJoin's WiB+-Tree (§III-C) in a chain of subwindows (§III-A).

    Adapts to any key distribution, increasing keys included; slower than RaP-Table on keys
    it can balance.

    Complexity: per subwindow as :class:`WiBTree`, over ``ceil(w / subwindow_size) + 1``
    subwindows for w live items; ``expire`` O(1) amortised.

    Parameters
    ----------
    n_keys : int
        Must be 1.
    subwindow_size : int
        Items per subwindow ``N_Sub``, >= 1. A join core over a count window of ``W`` tuples a
        stream, given no ``subwindow_size``, uses ``W`` (between 2^16 and 2^22;
        :meth:`window_options`).
    leaf_width : int
        Items per leaf ``W``, >= 2.
    fanout : int
        Children per inner node, >= 3.
    layout : str
        ``"wide"`` (default): 16-byte items, exact probes. ``"compact"``: full subwindows are
        packed into 8-byte items, coded from their own keys, and probes of them return a
        superset of the band that the join core refines on the full keys (``exact`` is
        False; see :class:`WiBTree`).
    """

    name = "wib_tree"
    store = WiBTree

    def __init__(
        self,
        n_keys: int = 1,
        subwindow_size: int = 2**16,
        leaf_width: int = 128,
        fanout: int = 64,
        layout: Layout = "wide",
    ) -> None:
        super().__init__(
            n_keys, subwindow_size, leaf_width=leaf_width, fanout=fanout, layout=layout
        )
        self.exact = item_layout(self.name, layout).exact

    @classmethod
    def window_options(cls, items: int) -> dict:
        """Subwindows of the window's size (between 2^16, the default, and 2^22): a probe
        scans a leaf in every subwindow (measured on the performance page: at W = 2^20 a
        tuple takes a fifth of the time it took with subwindows of 2^16)."""
        return {"subwindow_size": min(max(items, 2**16), 2**22)}
