"""Window indexes that several threads search and update at once: PIM-Tree (and IM-Tree) with
the concurrency control of PIM-Tree §3.3.3 and the nonblocking merge of §4.2, and a B+-tree
under one coarse lock. The shared-index join core (:mod:`streamjoin.actors.shared_index.core`)
drives them from ``nogil`` kernels on several threads.

What is locked
--------------
- T_S (the immutable CSS-tree) is searched lock-free: nothing writes it while threads run
  (§3.3.3: "traversing T_S is completely lock-free").
- T_I's subindexes B_p each have a spin lock (:mod:`~streamjoin.indexes.blocks.atomics`), padded to a
  cache line. An insert takes the lock of each run of items bound for one subindex (Alg. 1
  l. 8-11); a search takes B_p's lock before it seeks into B_p and holds it while it scans,
  hopping to B_{p+1}'s lock when the scan crosses into it (Alg. 2 l. 16-39). Node ids come
  from a high-water mark shared by the forest, taken with an atomic add (``bplus_tree``).
- ``bplus_tree`` is shared as one tree under one lock (the coarse baseline): it is the
  one-partition case of the same code, with no T_S.

Nonblocking merge (§4.2)
------------------------
With ``merge="blocking"`` T_I is merged into T_S when a step ends with ``m · w`` items in T_I,
before the next step starts (what a single thread does). With ``merge="nonblocking"`` the
merge runs on a *merging thread* of its own in two phases, started and switched only between
steps, when no worker thread runs (the paper's merging thread "blocks the assignment of new
tasks until all active threads finish"):

1. **Build.** T_I is frozen (F) and a fresh forest T_I' over the same partitions takes the
   inserts. The merging thread merges T_S and F into the leaf level of a new T_S and builds
   its inner nodes, reading only T_S and F; workers search T_S, F (lock-free: nobody writes
   it) and T_I' (locked).
2. **Pending updates.** At the first step boundary after the build, the new T_S replaces the
   old one and T_I' becomes the *pending* items, a sorted run cut by the new partitions; a
   new T_I (F's node arrays, reused) takes the inserts. The merging thread inserts each
   partition's pending run into the new T_I under that partition's lock and then flags the
   count of applied items (it inserts a chunk at a time); a search of partition q, under
   q's lock, also scans the part of q's pending run not applied yet, so every pending item
   is found exactly once.

Expired items are flagged (ref below the expiry bound, skipped by every scan) and dropped by
the merge that follows, as in the single-threaded ``pim_tree``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import grow, key_range
from streamjoin.indexes.blocks.atomics import PAD, load_acquire, spin_lock, store_release, unlock
from streamjoin.indexes.blocks.grid_codes import grid_bounds, route_of, scan_on
from streamjoin.indexes.blocks.no_refcount import njit_no_refcount
from streamjoin.indexes.blocks.sorted_runs import (
    lower_bound,
    lower_bound_row,
    prefetch,
    prefetch_range,
    scan_run,
)
from streamjoin.indexes.pim.bplus_tree import (
    MAX_HEIGHT,
    BPlusArrays,
    insert_into,
    new_path,
    seek_leaf,
)
from streamjoin.indexes.pim.css_tree import descend_css_tree

#: Slots of :attr:`SharedArrays.meta`.
N_PARTS, STRIDE, DEPTH, CSS_FANOUT, CSS_LEAF, PHASE, MIN_REF, CHUNK, COMPACT, REF_BASE = range(10)
META_SIZE = 10
#: :attr:`SharedArrays.meta` ``[PHASE]``: no merge in flight, the build, the pending updates.
STEADY, BUILDING, APPLYING = 0, 1, 2
#: How many keys ahead of the one being scanned a probe fetches its T_S leaf.
AHEAD = 8


class SharedArrays(NamedTuple):
    """What the threads of one step search and update: one stream's shared window index.

    The arrays of every kind of shared index have the same types, so one compiled kernel
    serves them all; a kind uses what it needs and leaves the rest empty. A wide T_S (float64
    keys beside int64 refs) fills ``ts_keys``, ``ts_refs``, ``inner`` and ``upper``; a compact
    one (``meta[COMPACT]``: uint64 grid-coded items, :mod:`~streamjoin.indexes.blocks.grid_codes`)
    fills ``ts_items``, ``inner_items``, ``upper_items``, ``grid`` and its side run. Both
    forms in one type cost the kernels a branch per key, not a third compile of the whole
    shared path (one per form of the conditions already: 80 s on an empty cache, measured).
    """

    #: int64 (META_SIZE,): partitions, leaves per partition, insertion depth, T_S node sizes,
    #: merge phase, expiry bound (items with smaller refs are expired), pending items applied
    #: per lock acquisition (:func:`apply_pending`), compact T_S (0 or 1), the ref a compact
    #: T_S's items count from
    meta: np.ndarray
    #: float64 (n,), int64 (n,): a wide T_S's leaf level, sorted by (key, ref)
    ts_keys: np.ndarray
    ts_refs: np.ndarray
    #: float64, int64: a wide T_S's inner keys; T_S's level offsets (``css_tree``)
    inner: np.ndarray
    offsets: np.ndarray
    #: float64 (P,): largest key of each partition of a wide T_S (+inf past the last)
    upper: np.ndarray
    #: uint64 (n,): a compact T_S's leaf level, sorted by code
    ts_items: np.ndarray
    #: uint64: a compact T_S's inner keys (item bounds)
    inner_items: np.ndarray
    #: uint64 (P,): largest item of each partition of a compact T_S (2**64 - 1 past the last);
    #: a key belongs to the partition its route (:func:`route_of`) falls in
    upper_items: np.ndarray
    #: uint64 (2,): a compact T_S's grid ``(base, shift)``
    grid: np.ndarray
    #: float64, int64: a compact T_S's side run, the (key, ref)-sorted items its grid left
    #: out, whole (:class:`~streamjoin.indexes.blocks.coded_level.CodedLevel`); searched lock-free
    side_keys: np.ndarray
    side_refs: np.ndarray
    #: T_I: P B+-trees over shared node arrays (the coarse tree: one)
    t: BPlusArrays
    #: int64 (P, 2): each subindex's (root, height)
    tops: np.ndarray
    #: int64 (P · PAD,): subindex p's lock at ``p · PAD`` (0: free)
    locks: np.ndarray
    #: int64 (P,): inserts per subindex since the last merge (§5, Fig. 13a)
    inserts: np.ndarray
    #: F, the T_I being merged (phase BUILDING), over the same partitions; searched unlocked
    frozen: BPlusArrays
    frozen_tops: np.ndarray
    #: float64, int64: the pending items (phase APPLYING), sorted by (key, ref)
    pend_keys: np.ndarray
    pend_refs: np.ndarray
    #: int64 (P + 1,): partition q's pending items are ``[pend_start[q], pend_start[q + 1])``
    pend_start: np.ndarray
    #: int64 (P,): how many of partition q's pending items are in T_I (the first ones;
    #: written under q's lock)
    applied: np.ndarray


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _part_of(n_parts, inner, inner_items, offsets, fanout, depth, compact, base, shift, key):
    """The subindex of T_I that takes ``key`` (Alg. 1 l. 1-7: descend T_S to depth D_I; a
    compact T_S's by the key's route, :func:`~streamjoin.indexes.blocks.grid_codes.route_of`)."""
    if n_parts == 1:
        return 0
    if compact:
        return descend_css_tree(inner_items, offsets, fanout, route_of(key, base, shift), depth)
    return descend_css_tree(inner, offsets, fanout, key, depth)


@njit(cache=True, nogil=True, inline="always")
def _last_part(upper, n_parts, vhi):
    """The last subindex that can hold keys up to ``vhi`` (on a compact T_S: items up to the
    band's item bound), the first whose upper bound reaches it: a scan stops at its end
    (Alg. 2 l. 31-33: later subindexes hold larger keys)."""
    if vhi != vhi:  # a NaN bound (an infinite key and bound) ends nowhere
        return n_parts - 1
    return lower_bound(upper, 0, n_parts, vhi)


# The kernels take a SharedArrays and read its fields once, into locals: a field read from
# the (large) tuple inside a loop cost up to a microsecond each (measured).


@njit(cache=True, nogil=True)
def insert_shared(s, keys, refs, path):
    """Insert a ``(key, ref)``-sorted run into T_I, each run of items bound for one subindex
    under that subindex's lock (PIM-Tree Alg. 1 l. 8-11). ``path``: scratch of
    :func:`~streamjoin.indexes.pim.bplus_tree.new_path`. Room for the nodes is reserved before the
    step. Returns how often a lock was found held (contention). O(b · (D_I · log(fanout_S) +
    H'_I · log(fanout_I))), Eq. 6 step 3.
    """
    return _insert_runs(s, keys, refs, path, np.empty(keys.shape[0] + 1, dtype=np.int64))


@njit_no_refcount
def _insert_runs(s, keys, refs, path, parts):
    """:func:`insert_shared` with scratch ``parts`` (int64, ``len(keys) + 1``), compiled
    without reference counting (``_nrt=False``: it allocates nothing), as is
    :func:`~streamjoin.indexes.pim.bplus_tree.insert_into`: with it, each subindex's run (about
    one per key) paid two atomic updates for every array it passed or sliced (docs/performance.md,
    reference counting)."""
    b = keys.shape[0]
    waits = 0
    if b == 0:
        return waits
    meta, inner, inner_items, offsets = s.meta, s.inner, s.inner_items, s.offsets
    t, tops, locks, inserts = s.t, s.tops, s.locks, s.inserts
    n_parts, fanout, depth = meta[N_PARTS], meta[CSS_FANOUT], meta[DEPTH]
    compact, base, shift = meta[COMPACT] != 0, s.grid[0], s.grid[1]
    parts[b] = -1
    size = t.leaf_keys.shape[1]
    leaf_keys, leaf_refs = t.leaf_keys.reshape(-1), t.leaf_refs.reshape(-1)
    for j in range(b):  # the subindexes, and (unlocked: only a hint) the leaves to update
        parts[j] = _part_of(
            n_parts, inner, inner_items, offsets, fanout, depth, compact, base, shift, keys[j]
        )
        leaf = _peek_leaf(t, tops, parts[j], keys[j])
        prefetch_range(leaf_keys, leaf * size, leaf * size + size)
        prefetch_range(leaf_refs, leaf * size, leaf * size + size)
    start = 0
    p = parts[0]
    for j in range(1, b + 1):
        q = parts[j]
        if q == p:
            continue
        waits += spin_lock(locks, p * PAD)
        insert_into(t, tops[p], keys[start:j], refs[start:j], path, np.bool_(True))
        inserts[p] += j - start
        unlock(locks, p * PAD)
        start, p = j, q
    return waits


@njit(cache=True, nogil=True, inline="always")
def _peek_leaf(t, tops, sub, x):
    """Where :func:`~streamjoin.indexes.pim.bplus_tree.seek_leaf` would end for ``x`` in subindex
    ``sub``, read without its lock: only a prefetch address. Another thread may be splitting
    nodes meanwhile, so every id and count read is clamped to the arrays (garbage values give
    a useless prefetch, never a read outside them)."""
    n_inner, n_leaves = t.inner_count.shape[0], t.leaf_count.shape[0]
    fanout = t.inner_keys.shape[1]
    node = tops[sub, 0]
    for _ in range(min(max(tops[sub, 1], 0), MAX_HEIGHT)):
        node = min(max(node, 0), n_inner - 1)  # an inner node's id
        count = min(max(t.inner_count[node], 1), fanout)
        j = max(lower_bound_row(t.inner_keys, node, 1, count, x) - 1, 0)
        node = t.inner_child[node, j]
    return min(max(node, 0), n_leaves - 1)  # a leaf's id


@njit_no_refcount
def _scan_pending(pending, q, key, lo, hi, vlo, vhi, min_ref, probe, out_p, out_r, n):
    """Partition ``q``'s pending items in the probe band that are not in T_I yet (called
    under ``q``'s lock, which the applier holds while it inserts a chunk of them).
    ``pending``: ``(applied, pend_start, pend_keys, pend_refs)``. Returns the new count (as
    :func:`~streamjoin.indexes.blocks.sorted_runs.scan_run`, matches past the outputs' room
    are counted only)."""
    applied, pend_start, pend_keys, pend_refs = pending
    a, b = pend_start[q] + load_acquire(applied, q), pend_start[q + 1]
    if a >= b:
        return n
    p = lower_bound(pend_keys, a, b, vlo)
    n, _ = scan_run(pend_keys, pend_refs, p, b, key, lo, hi, vhi, min_ref, probe, out_p, out_r, n)
    return n


class Frozen(NamedTuple):
    """F, the T_I a merge is building from, as :func:`_walk_frozen` scans it."""

    #: its node arrays
    t: BPlusArrays
    #: float64, int64: its leaves' keys and refs, flattened (leaf ``l``'s from ``l · size``)
    keys: np.ndarray
    refs: np.ndarray
    #: int64 (P, 2): each subindex's ``(root, height)``
    tops: np.ndarray


@njit_no_refcount
def _walk_frozen(frozen, last, sub, key, lo, hi, min_ref, probe, out_p, out_r, n):
    """Scan F (:class:`Frozen`), the T_I being merged, from subindex ``sub`` up to subindex
    ``last`` for one key's probe band (Alg. 2 l. 19-38 without locks: nobody writes F).
    Returns the new count (matches past the outputs' room counted only, as
    :func:`~streamjoin.indexes.blocks.sorted_runs.scan_run`)."""
    t, ti_keys, ti_refs, tops = frozen
    n_parts = tops.shape[0]
    size = t.leaf_keys.shape[1]
    vlo, vhi = key_range(key, lo, hi)
    node = seek_leaf(t, tops[sub, 0], tops[sub, 1], vlo)
    pos = lower_bound(ti_keys, node * size, node * size + t.leaf_count[node], vlo)
    while True:
        stop = node * size + t.leaf_count[node]
        n, done = scan_run(
            ti_keys, ti_refs, pos, stop, key, lo, hi, vhi, min_ref, probe, out_p, out_r, n
        )
        nxt = t.leaf_next[node]
        if done or nxt < 0:
            break
        if nxt < n_parts:
            if sub >= last:
                break
            sub += 1
        node = nxt
        pos = node * size
    return n


@njit(cache=True, nogil=True)
def probe_shared(s, keys, lo, hi, out_p, out_r, n):
    """Items with ``lo <= key - keys[i] <= hi`` and ``ref >= meta[MIN_REF]`` (PIM-Tree Alg. 2,
    concurrently): appended to ``out_p`` (``i``) and ``out_r`` (refs) from position ``n``.

    ``keys`` float64 (m,), ascending. As ``pim_tree``'s batched probe, in three stages so that
    cold leaves load while other keys are worked on: the descents of T_S (lock-free) and,
    unlocked and only as a hint, of each key's subindex (:func:`_peek_leaf`); then the leaf
    keys ``2 · AHEAD`` keys ahead and the scans' start (with the refs there) ``AHEAD`` keys
    ahead; then each key scans T_S lock-free and T_I under its subindexes' locks, and F,
    unlocked, while a merge builds. The T_I start found unlocked is a *versioned hint*: the
    subindex's insert count (bumped under its lock by every insert) is read before the hint
    and again under the lock, and only if another thread inserted into the subindex in
    between is the leaf sought again under the lock (a seqlock's validation: 1,024 keys
    probed 412 → 299 ns a key at W = 2^20, with the hint's descent fixed too). Items inserted
    by other threads during the step may be returned; the caller filters by its edge tuple
    (§4.1). A compact T_S is searched by item bounds and returns a superset of its matches
    (every other part is tested exactly), which the caller refines; its side run is scanned
    last, lock-free. Returns ``(out_p, out_r, n, waits)``.
    O(m · (H_S · log(fanout_S) + H'_I · log(fanout_I)) + items scanned), Eq. 6 step 1.
    """
    m = keys.shape[0]
    meta, ts_keys, ts_refs, inner, offsets = s.meta, s.ts_keys, s.ts_refs, s.inner, s.offsets
    t, tops, locks, upper, inserts = s.t, s.tops, s.locks, s.upper, s.inserts
    ts_items, inner_items, upper_items = s.ts_items, s.inner_items, s.upper_items
    side_keys, side_refs = s.side_keys, s.side_refs
    min_ref, phase = meta[MIN_REF], meta[PHASE]
    fanout, leaf_size, stride = meta[CSS_FANOUT], meta[CSS_LEAF], meta[STRIDE]
    compact, ref_base, base, shift = meta[COMPACT] != 0, meta[REF_BASE], s.grid[0], s.grid[1]
    n_ts = ts_items.shape[0] if compact else ts_keys.shape[0]
    n_side = side_keys.shape[0]
    levels = offsets.shape[0] - 1
    size = t.leaf_keys.shape[1]
    ti_keys, ti_refs = t.leaf_keys.reshape(-1), t.leaf_refs.reshape(-1)
    pending = (s.applied, s.pend_start, s.pend_keys, s.pend_refs)
    f_keys, f_refs = s.frozen.leaf_keys.reshape(-1), s.frozen.leaf_refs.reshape(-1)
    frozen = Frozen(s.frozen, f_keys, f_refs, s.frozen_tops)
    n_parts = tops.shape[0]
    leaf_count, leaf_next = t.leaf_count, t.leaf_next
    applying = phase == APPLYING
    ts_at = np.zeros(m, dtype=np.int64)  # T_S's leaf, then the scan's first position
    sub = np.zeros(m, dtype=np.int64)  # B_sub holds the bottom of the range
    last = np.empty(m, dtype=np.int64)  # B_last the top (_last_part)
    ti_leaf = np.empty(m, dtype=np.int64)  # the T_I leaf it starts in (a hint)
    ti_at = np.empty(m, dtype=np.int64)  # the T_I scan's first position (a hint)
    seen = np.empty(m, dtype=np.int64)  # B_sub's version when the hint was taken
    for i in range(m):  # l. 1-9: descend T_S for Range.min; its ancestor at D_I is B_sub
        vlo, vhi = key_range(keys[i], lo, hi)
        if compact:
            blo, bhi = grid_bounds(vlo, vhi, base, shift)
            last[i] = _last_part(upper_items, n_parts, bhi)
            if n_ts:
                ts_at[i] = descend_css_tree(inner_items, offsets, fanout, blo, levels)
        else:
            last[i] = _last_part(upper, n_parts, vhi)
            if n_ts:
                ts_at[i] = descend_css_tree(inner, offsets, fanout, vlo, levels)
        sub[i] = ts_at[i] // stride  # l. 3-4
        seen[i] = load_acquire(inserts, sub[i])  # before the hint's reads
        ti_leaf[i] = _peek_leaf(t, tops, sub[i], vlo)
    waits = 0
    for i in range(-2 * AHEAD, m):
        k = i + 2 * AHEAD
        if k < m:  # the keys of the leaves both scans start in
            start = min(ts_at[k] * leaf_size, n_ts)
            if compact:
                prefetch_range(ts_items, start, min(start + leaf_size, n_ts))
            else:
                prefetch_range(ts_keys, start, min(start + leaf_size, n_ts))
            prefetch_range(ti_keys, ti_leaf[k] * size, ti_leaf[k] * size + size)
        k = i + AHEAD
        if 0 <= k < m:  # where they start (l. 10-15, 18), and the refs there
            vlo, vhi = key_range(keys[k], lo, hi)
            start = min(ts_at[k] * leaf_size, n_ts)
            stop = min(start + leaf_size, n_ts)
            if compact:
                blo, _ = grid_bounds(vlo, vhi, base, shift)
                ts_at[k] = lower_bound(ts_items, start, stop, blo)
            else:
                ts_at[k] = lower_bound(ts_keys, start, stop, vlo)
                prefetch(ts_refs, min(ts_at[k], max(n_ts - 1, 0)))
            first = ti_leaf[k] * size  # a hint read unlocked: its count is clamped
            count = min(max(t.leaf_count[ti_leaf[k]], 0), size)
            ti_at[k] = lower_bound(ti_keys, first, first + count, vlo)
            prefetch(ti_refs, ti_at[k])
        if i < 0:
            continue
        key = keys[i]
        vlo, vhi = key_range(key, lo, hi)
        n_key = n  # this key's matches start here: scanned again if they did not fit
        while True:
            n = n_key
            if compact:  # l. 10-15, lock-free
                _, bhi = grid_bounds(vlo, vhi, base, shift)
                n = scan_on(
                    ts_items,
                    ts_refs,
                    ts_at[i],
                    n_ts,
                    key,
                    lo,
                    hi,
                    bhi,
                    min_ref,
                    ref_base,
                    i,
                    out_p,
                    out_r,
                    n,
                )
            else:
                n, _ = scan_run(
                    ts_keys, ts_refs, ts_at[i], n_ts, key, lo, hi, vhi, min_ref, i, out_p, out_r, n
                )
            # l. 16-39 on the live T_I, written out here: a call per key with the forest's
            # arrays as arguments cost more than the walk (measured)
            sb = sub[i]
            waits += spin_lock(locks, sb * PAD)  # l. 16
            if inserts[sb] == seen[i]:  # l. 17-18 found unlocked, and B_sb is as it was then
                node, pos = ti_leaf[i], ti_at[i]
            else:  # another thread inserted into B_sb meanwhile: seek again, under the lock
                node = seek_leaf(t, tops[sb, 0], tops[sb, 1], vlo)
                pos = lower_bound(ti_keys, node * size, node * size + leaf_count[node], vlo)
            while True:  # l. 19-38
                n, done = scan_run(
                    ti_keys,
                    ti_refs,
                    pos,
                    node * size + leaf_count[node],
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
                nxt = leaf_next[node]
                if done or nxt < 0:  # l. 25, 37-38
                    break
                if nxt < n_parts:  # l. 27: B_sb's last leaf; the next is B_{sb + 1}'s head
                    if sb >= last[i]:  # l. 31-33: later subindexes hold larger keys
                        break
                    if applying:  # B_sb is done: its pending run too, before its lock goes
                        n = _scan_pending(
                            pending, sb, key, lo, hi, vlo, vhi, min_ref, i, out_p, out_r, n
                        )
                    waits += spin_lock(locks, (sb + 1) * PAD)  # l. 28-30
                    unlock(locks, sb * PAD)
                    sb += 1
                node = nxt
                pos = node * size
            if applying:
                n = _scan_pending(pending, sb, key, lo, hi, vlo, vhi, min_ref, i, out_p, out_r, n)
            unlock(locks, sb * PAD)  # l. 39
            if phase == BUILDING:
                n = _walk_frozen(
                    frozen,
                    last[i],
                    sub[i],
                    key,
                    lo,
                    hi,
                    min_ref,
                    i,
                    out_p,
                    out_r,
                    n,
                )
            if n_side:  # the few keys a compact T_S holds outside its grid, whole
                at = lower_bound(side_keys, 0, n_side, vlo)
                n, _ = scan_run(
                    side_keys, side_refs, at, n_side, key, lo, hi, vhi, min_ref, i, out_p, out_r, n
                )
            if n <= out_p.shape[0]:
                break
            out_p, out_r = grow(out_p, n), grow(out_r, n)
    return out_p, out_r, n, waits


@njit(cache=True, nogil=True)
def apply_pending(s):
    """Phase 2 of the nonblocking merge (§4.2): insert each partition's pending run into T_I,
    ``meta[CHUNK]`` items per acquisition of its lock, and count them applied (a search scans
    the rest), while worker threads join and insert. Returns how often a lock was found held."""
    path = new_path()
    waits = 0
    t, tops, locks, inserts, applied = s.t, s.tops, s.locks, s.inserts, s.applied
    pend_start, pend_keys, pend_refs = s.pend_start, s.pend_keys, s.pend_refs
    chunk = max(s.meta[CHUNK], 1)
    for q in range(s.meta[N_PARTS]):
        a, b = pend_start[q], pend_start[q + 1]
        for c in range(a, b, chunk):
            d = min(c + chunk, b)
            waits += spin_lock(locks, q * PAD)
            insert_into(t, tops[q], pend_keys[c:d], pend_refs[c:d], path, np.bool_(False))
            inserts[q] += d - c
            store_release(applied, q, d - a)
            unlock(locks, q * PAD)
    return waits
