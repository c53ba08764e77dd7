"""Window indexes that several threads search and update at once: PIM-Tree (and IM-Tree) with
the concurrency control of PIM-Tree §3.3.3 and the nonblocking merge of §4.2, and a B+-tree
under one coarse lock. The shared-index join core (:mod:`streamjoin.actors.shared_index`)
drives them from ``nogil`` kernels on several threads.

What is locked
--------------
- T_S (the immutable CSS-tree) is searched lock-free: nothing writes it while threads run
  (§3.3.3: "traversing T_S is completely lock-free").
- T_I's subindexes B_p each have a spin lock (:mod:`~streamjoin.indexes.atomics`), padded to a
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
   partition applied; a search of partition q, under q's lock, also scans q's pending run
   while q is not applied, so every pending item is found exactly once.

Expired items are flagged (ref below the expiry bound, skipped by every scan) and dropped by
the merge that follows, as in the single-threaded ``pim_tree``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.atomics import PAD, spin_lock, store_release, unlock
from streamjoin.indexes.base import key_range
from streamjoin.indexes.bplus_tree import (
    BPlusArrays,
    insert_into,
    new_path,
    seek_leaf,
)
from streamjoin.indexes.css_tree import descend_css_tree
from streamjoin.indexes.sorted_runs import lower_bound, prefetch_range, scan_run

#: Slots of :attr:`SharedArrays.meta`.
N_PARTS, STRIDE, DEPTH, CSS_FANOUT, CSS_LEAF, PHASE, MIN_REF, META_SIZE = range(8)
#: :attr:`SharedArrays.meta` ``[PHASE]``: no merge in flight, the build, the pending updates.
STEADY, BUILDING, APPLYING = 0, 1, 2
#: How many keys ahead of the one being scanned a probe fetches its T_S leaf.
AHEAD = 8


class SharedArrays(NamedTuple):
    """What the threads of one step search and update: one stream's shared window index.

    The arrays of every kind of shared index have the same types, so one compiled kernel
    serves them all; a kind uses what it needs and leaves the rest empty.
    """

    #: int64 (META_SIZE,): partitions, leaves per partition, insertion depth, T_S node sizes,
    #: merge phase, expiry bound (items with smaller refs are expired)
    meta: np.ndarray
    #: float64 (n,), int64 (n,): T_S's leaf level, sorted by (key, ref)
    ts_keys: np.ndarray
    ts_refs: np.ndarray
    #: float64, int64: T_S's inner keys and level offsets (``css_tree``)
    inner: np.ndarray
    offsets: np.ndarray
    #: float64 (P,): largest key of each partition (+inf past the last)
    upper: np.ndarray
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
    #: int64 (P,): 1 once partition q's pending items are in T_I (written under q's lock)
    applied: np.ndarray


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _part_of(s, key):
    """The subindex of T_I that takes ``key`` (Alg. 1 l. 1-7: descend T_S to depth D_I)."""
    if s.meta[N_PARTS] == 1:
        return 0
    return descend_css_tree(s.inner, s.offsets, s.meta[CSS_FANOUT], key, s.meta[DEPTH])


@njit(cache=True, nogil=True)
def insert_shared(s, keys, refs, path):
    """Insert a ``(key, ref)``-sorted run into T_I, each run of items bound for one subindex
    under that subindex's lock (PIM-Tree Alg. 1 l. 8-11). ``path``: scratch of
    :func:`~streamjoin.indexes.bplus_tree.new_path`. Room for the nodes is reserved before the
    step. Returns how often a lock was found held (contention). O(b · (D_I · log(fanout_S) +
    H'_I · log(fanout_I))), Eq. 6 step 3.
    """
    b = keys.shape[0]
    waits = 0
    if b == 0:
        return waits
    start = 0
    p = _part_of(s, keys[0])
    for j in range(1, b + 1):
        q = _part_of(s, keys[j]) if j < b else -1
        if q == p:
            continue
        waits += spin_lock(s.locks, p * PAD)
        insert_into(s.t, s.tops[p], keys[start:j], refs[start:j], path)
        s.inserts[p] += j - start
        unlock(s.locks, p * PAD)
        start, p = j, q
    return waits


@njit(cache=True, nogil=True, inline="always")
def _scan_pending(s, q, key, lo, hi, vlo, vhi, min_ref, probe, out_p, out_r, n):
    """Partition ``q``'s pending items in the probe band, unless they are in T_I already
    (called under ``q``'s lock, which the applier holds while it inserts them)."""
    if s.applied[q]:
        return out_p, out_r, n
    a, b = s.pend_start[q], s.pend_start[q + 1]
    p = lower_bound(s.pend_keys, a, b, vlo)
    out_p, out_r, n, _ = scan_run(
        s.pend_keys, s.pend_refs, p, b, key, lo, hi, vhi, min_ref, probe, out_p, out_r, n
    )
    return out_p, out_r, n


@njit(cache=True, nogil=True)
def _walk_forest(s, t, tops, locked, sub, key, lo, hi, min_ref, probe, out_p, out_r, n):
    """Scan T_I (``t``, ``tops``) from subindex ``sub`` for the probe band (Alg. 2 l. 16-39).

    ``locked``: take each subindex's lock (the live T_I) or not (F, which nobody writes);
    in phase APPLYING the pending run of each subindex visited is scanned under its lock.
    Returns ``(out_p, out_r, n, waits)``.
    """
    vlo, vhi = key_range(key, lo, hi)
    n_parts = tops.shape[0]
    pending = locked and s.meta[PHASE] == APPLYING
    size = t.leaf_keys.shape[1]
    ti_keys = t.leaf_keys.reshape(-1)
    ti_refs = t.leaf_refs.reshape(-1)
    waits = 0
    if locked:
        waits += spin_lock(s.locks, sub * PAD)  # l. 16
    node = seek_leaf(t, tops[sub, 0], tops[sub, 1], vlo)  # l. 17-18, under the lock
    pos = lower_bound(ti_keys, node * size, node * size + t.leaf_count[node], vlo)
    while True:  # l. 19-38
        out_p, out_r, n, done = scan_run(
            ti_keys,
            ti_refs,
            pos,
            node * size + t.leaf_count[node],
            key,
            lo,
            hi,
            vhi,
            min_ref,
            probe,
            out_p,
            out_r,
            n,
        )
        nxt = t.leaf_next[node]
        if done or nxt < 0:  # l. 25, 37-38
            break
        if nxt < n_parts:  # l. 27: B_sub's last leaf; the next is B_{sub + 1}'s head
            if pending:
                out_p, out_r, n = _scan_pending(
                    s, sub, key, lo, hi, vlo, vhi, min_ref, probe, out_p, out_r, n
                )
            if vhi <= s.upper[sub]:  # l. 31-33: later subindexes hold larger keys
                break
            if locked:  # l. 28-30
                waits += spin_lock(s.locks, (sub + 1) * PAD)
                unlock(s.locks, sub * PAD)
            sub += 1
        node = nxt
        pos = node * size
    if pending:
        out_p, out_r, n = _scan_pending(
            s, sub, key, lo, hi, vlo, vhi, min_ref, probe, out_p, out_r, n
        )
    if locked:
        unlock(s.locks, sub * PAD)  # l. 39
    return out_p, out_r, n, waits


@njit(cache=True, nogil=True)
def probe_shared(s, keys, lo, hi, out_p, out_r, n):
    """Items with ``lo <= key - keys[i] <= hi`` and ``ref >= meta[MIN_REF]`` (PIM-Tree Alg. 2,
    concurrently): appended to ``out_p`` (``i``) and ``out_r`` (refs) from position ``n``.

    ``keys`` float64 (m,), ascending: the descents of T_S share nodes and its leaves are
    fetched ``AHEAD`` keys before they are scanned, lock-free; then each key scans T_I under
    its subindexes' locks (and F, unlocked, while a merge builds). Items inserted by other
    threads during the step may be returned; the caller filters by its edge tuple (§4.1).
    Returns ``(out_p, out_r, n, waits)``. O(m · (H_S · log(fanout_S) + H'_I · log(fanout_I))
    + items scanned), Eq. 6 step 1.
    """
    m = keys.shape[0]
    meta = s.meta
    min_ref = meta[MIN_REF]
    n_ts = s.ts_keys.shape[0]
    waits = 0
    sub = np.zeros(m, dtype=np.int64)
    if n_ts:
        fanout, leaf_size, stride = meta[CSS_FANOUT], meta[CSS_LEAF], meta[STRIDE]
        levels = s.offsets.shape[0] - 1
        for i in range(m):  # l. 1-9: T_S's leaf for Range.min; its ancestor at D_I is B_sub
            vlo, _ = key_range(keys[i], lo, hi)
            sub[i] = descend_css_tree(s.inner, s.offsets, fanout, vlo, levels)
        for i in range(-AHEAD, m):
            k = i + AHEAD
            if k < m:  # the keys of the leaf the scan of key k starts in
                start = min(sub[k] * leaf_size, n_ts)
                prefetch_range(s.ts_keys, start, min(start + leaf_size, n_ts))
            if i < 0:
                continue
            vlo, vhi = key_range(keys[i], lo, hi)
            start = min(sub[i] * leaf_size, n_ts)
            p = lower_bound(s.ts_keys, start, min(start + leaf_size, n_ts), vlo)  # l. 10-15
            out_p, out_r, n, _ = scan_run(
                s.ts_keys, s.ts_refs, p, n_ts, keys[i], lo, hi, vhi, min_ref, i, out_p, out_r, n
            )
            sub[i] //= stride  # l. 3-4
    building = meta[PHASE] == BUILDING
    for i in range(m):
        out_p, out_r, n, w = _walk_forest(
            s, s.t, s.tops, True, sub[i], keys[i], lo, hi, min_ref, i, out_p, out_r, n
        )
        waits += w
        if building:
            out_p, out_r, n, _ = _walk_forest(
                s,
                s.frozen,
                s.frozen_tops,
                False,
                sub[i],
                keys[i],
                lo,
                hi,
                min_ref,
                i,
                out_p,
                out_r,
                n,
            )
    return out_p, out_r, n, waits


@njit(cache=True, nogil=True)
def apply_pending(s):
    """Phase 2 of the nonblocking merge (§4.2): insert each partition's pending run into T_I
    under its lock and flag it applied, while worker threads join and insert. Returns how
    often a lock was found held."""
    path = new_path()
    waits = 0
    for q in range(s.meta[N_PARTS]):
        a, b = s.pend_start[q], s.pend_start[q + 1]
        waits += spin_lock(s.locks, q * PAD)
        if b > a:
            insert_into(s.t, s.tops[q], s.pend_keys[a:b], s.pend_refs[a:b], path)
            s.inserts[q] += b - a
        store_release(s.applied, q, 1)
        unlock(s.locks, q * PAD)
    return waits
