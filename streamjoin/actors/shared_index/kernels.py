"""numba kernels of the shared-index join core (PIM-Tree §4.1): the loop each worker thread
runs over a step's tasks, and the step's bookkeeping around it.

A step holds the tuples of one batch or of several (the core decides: ``step_tuples``). Its
arrays are made for a capacity (:func:`new_step`); the core's thread stages each batch into
them (:func:`stage_batch`), appends its tuples to the tuple stores and publishes its tasks
(:func:`publish_batch`) while the threads run the tasks published before. ``tup`` holds, per
tuple in arrival order, the rows of :data:`TUP`: ``seq``, ``stream``, ``idx``, ``lo_idx``,
``ingest_ns``, its ref in its own stream's store (``OWN``) and the ref bound of the probed
stream's tuples that arrived before it (``OPP``: the probed store's refs ``< OPP`` are its
predecessors). Task ``t`` is tuples ``[task_start[t], task_start[t + 1])``: a batch is cut
into tasks of at most ``task_size`` tuples, so a task never waits for a later batch.

Control slots (``ctl``, each on its own cache line, :data:`~streamjoin.indexes.blocks.atomics.PAD`):
``NEXT`` the next task to hand out, ``EDGE_LOCK`` and ``PROP_LOCK`` the test-and-set mutexes of
the edge tuple and of result propagation, ``HEAD`` the first task not propagated, ``OUT_N``
the pairs propagated, ``STALLED`` set when propagation has to wait for the step's end,
``PUBLISHED`` the tasks the threads may claim, ``CLOSED`` set when no more will come,
``TUPLES`` the tuples staged (the core's thread's own count), ``FAILED`` set when a thread
failed (the others stop claiming and stop waiting for its task: the step is lost, and its
error ends the run).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.actors.join_kernels import EITHER, R_PROBES, S_PROBES, theta_oriented
from streamjoin.actors.shared_index.thread_pool import publish
from streamjoin.actors.store import IDX, INGEST_NS, SEQ, first_row
from streamjoin.indexes.base import copy_cols, key_range
from streamjoin.indexes.blocks.atomics import (
    PAD,
    atomic_cas,
    back_off,
    cpu_relax,
    cycle_count,
    load_acquire,
    store_release,
    try_lock,
    unlock,
    yield_cpu,
)
from streamjoin.indexes.blocks.key_order import stable_order_into
from streamjoin.indexes.blocks.sorted_runs import lower_bound, prefetch
from streamjoin.indexes.pim.bplus_tree import new_path
from streamjoin.indexes.pim.pim_tree_shared import (
    COMPACT,
    SharedArrays,
    insert_shared,
    probe_shared,
)

#: How many index candidates ahead the stored tuple's row is fetched (as ``probe_pairs``).
_AHEAD = 8
#: Rows of ``tup``.
T_SEQ, T_STREAM, T_IDX, T_LO_IDX, T_INGEST, T_OWN, T_OPP, TUP = range(8)
#: Slots of ``ctl`` (times PAD).
NEXT, EDGE_LOCK, PROP_LOCK, HEAD, OUT_N, STALLED, PUBLISHED, CLOSED, TUPLES, FAILED, CTL = range(11)
#: What :func:`run_tasks` returns with: every task of a closed step claimed, or none to claim
#: now (the caller's thread goes back to feed the step; a pool thread blocks until more come).
DONE, IDLE = 0, 1
#: Task status (§4.1): not yet handed out (or its keys not yet sorted), its sorted keys
#: published and its results under way, results ready (propagated: ``HEAD`` passed it).
AVAILABLE, ACTIVE, COMPLETED = 0, 1, 2
#: Columns of ``task_meta``: the thread whose buffer holds the task's pairs (-1 - thread if
#: they spilled), their offset there, their count; its stream-0 tuples (published when the
#: task turns ACTIVE, with its sorted keys: :func:`_join_tail`).
M_THREAD, M_OFF, M_CNT, M_N0, META = range(5)
#: Columns of ``task_work`` (per task) and of a thread's counters: tuples, probes of an
#: index, index candidates, pairs, tuples inserted, tail candidates past the edge tuple (the
#: window's rows for ``nested_loop``), times a lock was found held.
W_TUPLES, W_PROBES, W_CANDIDATES, W_PAIRS, W_INSERTED, W_SCANNED, W_WAITS, WORK = range(8)
#: ``cfg`` slots: the step's largest task, a self-join, an index, ordered output, the test
#: hook's spins and seed, and how long (cycle-counter ticks) a pool thread spins for a task
#: before it goes back to block.
C_TASK_SIZE, C_SELF_JOIN, C_INDEXED, C_ORDERED, C_DELAY, C_SEED, C_IDLE_TICKS, CFG = range(8)


class Step(NamedTuple):
    """The arrays of one step that the threads share (:func:`new_step`), for ``cap`` tuples
    and ``max_tasks`` tasks; positions are the step's (its tuples in arrival order)."""

    tup: np.ndarray  # int64 (TUP, cap): the module docstring's rows
    attrs: np.ndarray  # float64 (A, cap): the tuples' attributes
    ypos: np.ndarray  # int64 (2, cap): step position of the k-th stream-y tuple
    n_y: np.ndarray  # int64 (2,): tuples per stream published to the threads
    first_ref: np.ndarray  # int64 (2,): the ref of each probed stream's first tuple of the step
    keys: np.ndarray  # float64 (2, cap): their served keys, stream by stream (ypos's order)
    ctl: np.ndarray  # int64 (CTL * PAD,): control slots, zero
    edge: np.ndarray  # int64 (2 * PAD,): each stream's edge tuple, zero
    flags: np.ndarray  # int64 (cap,): indexed flags, zero
    status: np.ndarray  # int64 (max_tasks,): AVAILABLE
    task_meta: np.ndarray  # int64 (max_tasks, META)
    task_work: np.ndarray  # int64 (max_tasks, WORK), zero
    pub_keys: np.ndarray  # float64 (cap,): each task's keys, sorted
    pub_pos: np.ndarray  # int64 (cap,): their step positions
    buf_n: np.ndarray  # int64 (threads * PAD,): pairs in each thread's buffer, zero
    spill_n: np.ndarray  # int64 (threads * PAD,): pairs each thread spilled, zero
    task_start: np.ndarray  # int64 (max_tasks + 1,): each task's first position
    task_of: np.ndarray  # int64 (cap,): each tuple's task


class Window(NamedTuple):
    """One probed stream's window as the threads read it: its tuple store and shared index."""

    #: int64 (cap, ROW): the store's rows (:data:`~streamjoin.actors.store.SEQ`, ``IDX``, …)
    rows: np.ndarray
    #: float64 (2 A, cap): their attributes, images then residuals
    attrs: np.ndarray
    #: the ref of row 0
    base: int
    #: the first live row
    head: int
    #: the shared index's state (a placeholder when the core has no index)
    state: SharedArrays


class Probing(NamedTuple):
    """How a step's tuples probe, fixed between steps (the conditions change type once, when
    an integer beyond ``2**52`` is first seen: rebuilt each step)."""

    #: θ (:class:`~streamjoin.actors.join_kernels.ImageConditions` or ``Conditions``)
    conds: tuple
    #: int64 (2,): the row of ``attrs`` that keys each stream's tuples (the served condition)
    key_rows: np.ndarray
    #: float64 (3, 2, 2): per orientation, the index probe's boxes (lo, hi) around a key
    boxes: np.ndarray
    #: int64 (3,): boxes per orientation
    n_boxes: np.ndarray
    #: θ is symmetric (a self-join's candidate is then checked in one orientation)
    symmetric: bool
    #: the first condition is a conjunct the index serves: a scan tests it alone first (else,
    #: when no index serves any, every row is tested against the whole of θ)
    first_served: bool


class Probers(NamedTuple):
    """A task's tuples of one stream, as they probe the other stream's window."""

    #: int64: their batch positions, ``[:n]`` used
    gs: np.ndarray
    #: int64 (n,): the stable order that sorts them by key
    order: np.ndarray
    #: float64 (n,): their keys, ascending
    keys: np.ndarray
    #: how many there are
    n: int


class Side(NamedTuple):
    """Which way a task's probers join: from stream ``x`` into stream ``y``'s window."""

    #: the probing stream
    x: int
    #: the probed stream (``x`` itself in a self-join)
    y: int
    #: the probed stream's edge ref for the task: refs below it are indexed
    e_ref: int
    #: ``R_PROBES``, ``S_PROBES`` or ``EITHER`` (a self-join)
    orient: int
    #: a prober is its pairs' r
    probe_is_r: bool


@njit(cache=True, nogil=True)
def new_step(cap, max_tasks, n_attrs, first_ref, threads):
    """The :class:`Step` of up to ``cap`` tuples in ``max_tasks`` tasks, whose stream-``y``
    tuples get refs from ``first_ref[y]`` on (one call, not a dozen allocations from Python).
    O(cap) zeroed."""
    task_start = np.zeros(max_tasks + 1, dtype=np.int64)
    return Step(
        np.empty((TUP, cap), dtype=np.int64),
        np.empty((n_attrs, cap), dtype=np.float64),
        np.empty((2, cap), dtype=np.int64),
        np.zeros(2, dtype=np.int64),
        first_ref.copy(),
        np.empty((2, cap), dtype=np.float64),
        np.zeros(CTL * PAD, dtype=np.int64),
        np.zeros(2 * PAD, dtype=np.int64),
        np.zeros(cap, dtype=np.int64),
        np.zeros(max_tasks, dtype=np.int64),
        np.zeros((max_tasks, META), dtype=np.int64),
        np.zeros((max_tasks, WORK), dtype=np.int64),
        np.empty(cap, dtype=np.float64),
        np.empty(cap, dtype=np.int64),
        np.zeros(threads * PAD, dtype=np.int64),
        np.zeros(threads * PAD, dtype=np.int64),
        task_start,
        np.empty(cap, dtype=np.int64),
    )


@njit(cache=True, nogil=True)
def stage_batch(
    step, stream, seq, idx, lo_idx, ingest, attrs, key_rows, self_join, n_tasks, task_size
):
    """Write a batch into ``step`` after the tuples staged so far (``ctl[TUPLES]``) and cut it
    into tasks ``n_tasks, …`` of at most ``task_size`` tuples; nothing is published yet (the
    threads read only published tasks: :func:`publish_batch`). ``key_rows[x]``: the row of
    ``attrs`` that keys stream ``x``'s tuples. Returns each stream's tuple count after the
    batch and the tasks in all. O(b)."""
    b = stream.shape[0]
    b0 = step.ctl[TUPLES * PAD]
    tup, ypos, keys, first_ref = step.tup, step.ypos, step.keys, step.first_ref
    n_y = step.n_y.copy()
    for i in range(b):
        g = b0 + i
        x = stream[i]
        y = x if self_join else 1 - x
        tup[T_SEQ, g] = seq[i]
        tup[T_STREAM, g] = x
        tup[T_IDX, g] = idx[i]
        tup[T_LO_IDX, g] = lo_idx[i]
        tup[T_INGEST, g] = ingest[i]
        tup[T_OWN, g] = first_ref[x] + n_y[x]
        tup[T_OPP, g] = first_ref[y] + n_y[y]
        ypos[x, n_y[x]] = g
        keys[x, n_y[x]] = attrs[key_rows[x], i]
        n_y[x] += 1
    copy_cols(step.attrs, b0, attrs, 0, b)
    t = n_tasks
    for a in range(b0, b0 + b, task_size):
        step.task_start[t] = a
        for g in range(a, min(a + task_size, b0 + b)):
            step.task_of[g] = t
        t += 1
    step.task_start[t] = b0 + b
    step.ctl[TUPLES * PAD] = b0 + b
    return n_y, t


@njit(cache=True, nogil=True)
def publish_batch(ctl, published_n_y, n_y, n_tasks):
    """Hand the tasks staged up to ``n_tasks`` to the threads (the batch's tuples are in the
    stores and announced to the indexes by then): the stream counts first (into the step's
    ``n_y``, ``published_n_y``), then the task count (``ctl``), each a release store that the
    threads read with acquire. Takes the two arrays, not the step: a call unboxes every array
    of a tuple it is given (a few µs for a step's, at every batch)."""
    for y in range(2):
        store_release(published_n_y, y, n_y[y])
    store_release(ctl, PUBLISHED * PAD, n_tasks)


@njit(cache=True, nogil=True)
def mark_failed(ctl):
    """A thread failed: the others stop claiming tasks and waiting for its."""
    store_release(ctl, FAILED * PAD, 1)


@njit(cache=True, nogil=True)
def close_step(ctl):
    """No more tasks will come (the step's ``ctl``): threads that find none to claim end
    their share."""
    store_release(ctl, CLOSED * PAD, 1)


@njit(cache=True, nogil=True)
def drain_pairs(ctl, out, start):
    """The pairs propagated since ``start`` (a copy) and the first task not propagated: the
    head is read before the pair count, which is written before it, so every pair of a task
    before the head is among them."""
    h = load_acquire(ctl, HEAD * PAD)
    n = load_acquire(ctl, OUT_N * PAD)
    return out[:, start:n].copy(), h


@njit(cache=True, nogil=True)
def wait_propagated(ctl, status, task_meta, buf, out):
    """Until every published task's pairs are propagated (or propagation stalled: the step's
    end gathers them), propagating what is ready meanwhile. Returns whether it stalled."""
    spins = 0
    while True:
        _propagate(ctl, status, task_meta, buf, out)
        if load_acquire(ctl, STALLED * PAD) or load_acquire(ctl, FAILED * PAD):
            return True
        if load_acquire(ctl, HEAD * PAD) >= load_acquire(ctl, PUBLISHED * PAD):
            return False
        spins = back_off(spins)


@njit(cache=True, nogil=True, inline="always")
def _delay(rng, max_spins):
    """The test hook: wait a random while (spins, sometimes a yield) if ``max_spins``; ``rng``
    is the thread's generator state (an int64 LCG, wrapping)."""
    if max_spins <= 0:
        return rng
    rng = rng * 6364136223846793005 + 1442695040888963407
    r = (rng >> 33) & 0x7FFFFFFF
    for _ in range(r % max_spins):
        cpu_relax()
    if r & 3 == 0:
        yield_cpu()
    return rng


@njit(cache=True, nogil=True, inline="always")
def _emit(pairs, n, r, s, ingest, later, earlier):
    if n == pairs.shape[1]:
        bigger = np.empty((5, 2 * n + 64), dtype=np.int64)
        copy_cols(bigger, 0, pairs, 0, n)
        pairs = bigger
    pairs[0, n] = r
    pairs[1, n] = s
    pairs[2, n] = ingest
    pairs[3, n] = later
    pairs[4, n] = earlier
    return pairs, n + 1


@njit(cache=True, nogil=True, inline="always")
def _primary_holds(d, lo0, hi0, orient):
    """The served condition ``lo0 <= s - r <= hi0`` for ``d`` = stored key minus probing key
    (``s - r`` when r probes), in orientation ``orient`` (``EITHER``: either may be r). Scalars
    only: an inlined θ call with array arguments cost reference counting per row."""
    if orient == R_PROBES:
        return lo0 <= d <= hi0
    if orient == S_PROBES:
        return lo0 <= -d <= hi0
    return lo0 <= -d <= hi0 or lo0 <= d <= hi0


@njit(cache=True, nogil=True)
def _join_tail(probers, side, t, step, window, conds, pairs, n_pairs, work):
    """§4.1's scan of the not-yet-indexed tail, from the edge tuple to each tuple of the task,
    as a band join of sorted runs: the tail's stream-``y`` tuples lie in tasks ``u0 … t`` (the
    step's tuples before the edge are all indexed, its later ones are no predecessors), and
    each task publishes its tuples sorted by key (``pub_keys``/``pub_pos``, stream 0 first)
    before it turns ACTIVE; for each probing tuple (``keys`` ascending, ``order`` to ``gs``) a
    binary search in each such task's run finds the keys in its band, checked exactly, in the
    window and before it in arrival. O(n_g · (tasks in flight) · log(task_size) + matches),
    not O(n_g · rows past the edge): a task's tail costs about the same whatever its size.
    ``t``: the task; ``conds``: θ; the rest as :func:`_join_tuples`."""
    gs, order, keys, n_g = probers
    y, e_ref, orient, probe_is_r = side.y, side.e_ref, side.orient, side.probe_is_r
    tup, ypos, first_ref = step.tup, step.ypos, step.first_ref
    status, task_meta, pub_keys, pub_pos = step.status, step.task_meta, step.pub_keys, step.pub_pos
    task_start = step.task_start
    attrs, store_attrs, base = step.attrs, window.attrs, window.base
    k0 = e_ref - first_ref[y]
    # (e_ref is at most the task's first tuple's OPP: published with it, as n_y)
    if n_g == 0 or k0 >= load_acquire(step.n_y, y):
        return pairs, n_pairs
    u0 = step.task_of[ypos[y, k0]]
    lo0, hi0 = conds.lo[0], conds.hi[0]
    if orient == R_PROBES:  # stored minus probing key, d, within [dlo, dhi]
        dlo, dhi = lo0, hi0
    elif orient == S_PROBES:
        dlo, dhi = -hi0, -lo0
    else:
        dlo, dhi = min(lo0, -hi0), max(hi0, -lo0)
    residual = conds.lo.shape[0] > 1
    # rows of ``tup`` as 1-d views, taken once: 2-d reads in the loop made numba keep
    # reference counting in it (45 → 30 ns a tuple at W = 2**20)
    own_c, idx_c, opp_c, lo_c = tup[T_OWN], tup[T_IDX], tup[T_OPP], tup[T_LO_IDX]
    seq_c, ing_c = tup[T_SEQ], tup[T_INGEST]
    for u in range(u0, t + 1):
        spins = 0
        while load_acquire(status, u) == AVAILABLE:  # claimed before t: sorting, briefly
            spins = back_off(spins)  # (its thread may have lost its processor: yields too)
            if load_acquire(step.ctl, FAILED * PAD):  # (its thread failed: the step is lost)
                return pairs, n_pairs
        a = task_start[u]
        n0 = task_meta[u, M_N0]
        ya, yb = (a, a + n0) if y == 0 else (a + n0, task_start[u + 1])
        if ya == yb:
            continue
        for i in range(n_g):
            g = gs[order[i]]
            g_key = keys[i]
            end = opp_c[g]
            lo_idx = lo_c[g]
            vlo, vhi = key_range(g_key, dlo, dhi)
            q = lower_bound(pub_keys, ya, yb, vlo)
            while q < yb and pub_keys[q] <= vhi:
                c = pub_pos[q]
                ref = own_c[c]
                s_key = pub_keys[q]
                q += 1
                work[W_SCANNED] += 1
                if ref < e_ref or ref >= end or idx_c[c] < lo_idx:
                    continue  # indexed (the probe found it), not before g, or out of window
                if not _primary_holds(s_key - g_key, lo0, hi0, orient):
                    continue
                if residual and not theta_oriented(
                    attrs, g, store_attrs, ref - base, conds, 0, orient
                ):
                    continue
                g_seq, c_seq = seq_c[g], seq_c[c]
                ingest = max(ing_c[g], ing_c[c])
                if probe_is_r:
                    pairs, n_pairs = _emit(pairs, n_pairs, g_seq, c_seq, ingest, g_seq, c_seq)
                else:
                    pairs, n_pairs = _emit(pairs, n_pairs, c_seq, g_seq, ingest, g_seq, c_seq)
    return pairs, n_pairs


@njit(cache=True, nogil=True)
def _join_tuples(
    probers, side, step, window, indexed, probing, cand_p, cand_r, pairs, n_pairs, work
):
    """§4.1 result generation for a task's stream-``x`` tuples (:class:`Probers`) against the
    window of stream ``y`` (:class:`Side`, :class:`Window`): the index for the refs below the
    edge tuple ``e_ref`` (the tail past it is :func:`_join_tail`'s), or with no index a scan of
    the whole window in the store. ``cand_p``, ``cand_r``, ``pairs``: the thread's scratch,
    ``work``: the task's counters. Returns the grown scratch arrays and the pair count."""
    gs, order, keys, n_g = probers
    x, y, e_ref, orient, probe_is_r = side
    tup, attrs = step.tup, step.attrs
    rows, store_attrs, base, head, state = window
    conds, key_rows, boxes, n_boxes, symmetric, first_served = probing
    if indexed and n_g:
        # int64, not the literal 0: a literal is a specialisation of its own, and would
        # compile probe_shared a second time (docs/performance.md, compiling)
        n_c = split = np.int64(0)
        for box in range(n_boxes[orient]):
            cand_p, cand_r, n_c, waits = probe_shared(
                state, keys, boxes[orient, box, 0], boxes[orient, box, 1], cand_p, cand_r, n_c
            )
            work[W_WAITS] += waits
            if box == 0:
                split = n_c  # the first box's candidates end here
        work[W_PROBES] += n_g
        work[W_CANDIDATES] += n_c
        # θ for the index's candidates: the band a box searched was checked exactly by the
        # index (unless its T_S is compact: a superset, refined here). An asymmetric
        # self-join's two disjoint boxes (stored r, then stored s: JoinSpec.probe_boxes) each
        # stand for one orientation, and their candidates are checked in it alone: a compact
        # T_S's superset may return an item from both boxes, and only one orientation holds.
        first = 0 if state.meta[COMPACT] else 1
        c_orient = orient
        two = orient == EITHER and n_boxes[orient] == 2
        if orient == EITHER and symmetric:
            c_orient = S_PROBES
        elif orient == EITHER and not two:  # one box for both orientations: either may hold
            first = 0
        width = rows.shape[1]
        refine = first < conds.lo.shape[0]
        # room for every candidate before the loop, and ``tup``'s rows as 1-d views: growing
        # the pairs and 2-d reads in the loop made numba keep reference counting in it
        # (119 → 80 ns a tuple of 2 candidates at W = 2**20)
        if n_pairs + n_c > pairs.shape[1]:
            bigger = np.empty((5, 2 * (n_pairs + n_c)), dtype=np.int64)
            copy_cols(bigger, 0, pairs, 0, n_pairs)
            pairs = bigger
        seq_c, lo_c, ing_c = tup[T_SEQ], tup[T_LO_IDX], tup[T_INGEST]
        p0, p1, p2, p3, p4 = pairs[0], pairs[1], pairs[2], pairs[3], pairs[4]
        # images only: a residual is read for a difference near a bound only
        n_images, cap = store_attrs.shape[0] // 2, store_attrs.shape[1]
        for c in range(n_c):
            if c + _AHEAD < n_c:  # stored rows are scattered: fetch them a few ahead
                ahead = cand_r[c + _AHEAD] - base
                prefetch(rows, ahead * width)
                if refine:  # and the attributes θ reads (a compact T_S's refinement)
                    for a in range(n_images):
                        prefetch(store_attrs, a * cap + ahead)
            ref = cand_r[c]
            if ref >= e_ref:  # not known to be indexed: the scan below finds it (§4.1)
                continue
            if two:
                c_orient = S_PROBES if c < split else R_PROBES
            g = gs[order[cand_p[c]]]
            j = ref - base
            if rows[j, IDX] < lo_c[g]:  # before g's window
                continue
            if refine and not theta_oriented(attrs, g, store_attrs, j, conds, first, c_orient):
                continue
            c_seq = rows[j, SEQ]
            g_seq = seq_c[g]
            ingest = max(ing_c[g], rows[j, INGEST_NS])
            if probe_is_r:
                p0[n_pairs], p1[n_pairs] = g_seq, c_seq
            else:
                p0[n_pairs], p1[n_pairs] = c_seq, g_seq
            p2[n_pairs], p3[n_pairs], p4[n_pairs] = ingest, g_seq, c_seq
            n_pairs += 1
    # the scan tests the primary condition inline on one column (an inlined θ call per row
    # cost reference counting of its array arguments, measured at ~90 ns a row), the rest
    # of θ only for rows that pass it
    # the served condition compares the probing tuple's own-side attribute (``key_rows[x]``)
    # with the stored tuple's (``key_rows[y]``): one row each, as the index keys them
    s_key = store_attrs[key_rows[y]]
    g_row = key_rows[x]
    lo0, hi0 = conds.lo[0], conds.hi[0]
    residual = conds.lo.shape[0] > 1 or not first_served
    if indexed:  # the tail past the edge tuple: _join_tail
        return cand_p, cand_r, pairs, n_pairs
    for a in range(n_g):  # no index: the whole window is the tail
        g = gs[a]
        end = tup[T_OPP, g]
        start = base + first_row(rows, head, end - base, tup[T_LO_IDX, g])
        work[W_SCANNED] += end - start
        g_seq, g_ingest = tup[T_SEQ, g], tup[T_INGEST, g]
        g_key = attrs[g_row, g]
        for j in range(start - base, end - base):
            if first_served and not _primary_holds(s_key[j] - g_key, lo0, hi0, orient):
                continue
            if residual and not theta_oriented(attrs, g, store_attrs, j, conds, 0, orient):
                continue
            c_seq = rows[j, SEQ]
            ingest = max(g_ingest, rows[j, INGEST_NS])
            if probe_is_r:
                pairs, n_pairs = _emit(pairs, n_pairs, g_seq, c_seq, ingest, g_seq, c_seq)
            else:
                pairs, n_pairs = _emit(pairs, n_pairs, c_seq, g_seq, ingest, g_seq, c_seq)
    return cand_p, cand_r, pairs, n_pairs


@njit(cache=True, nogil=True, inline="always")
def _advance_edge(ctl, edge, indexed_flags, ypos, n_y, n_streams):
    """Index update, last part (§4.1): move each stream's edge tuple past the tuples indexed
    since, unless another thread is doing it (test-and-set: then skip)."""
    if not try_lock(ctl, EDGE_LOCK * PAD):
        return
    for y in range(n_streams):
        k = edge[y * PAD]
        n = load_acquire(n_y, y)
        while k < n and load_acquire(indexed_flags, ypos[y, k]) != 0:
            k += 1
        store_release(edge, y * PAD, k)
    unlock(ctl, EDGE_LOCK * PAD)


@njit(cache=True, nogil=True)
def _propagate(ctl, status, task_meta, buf, out):
    """Result propagation (§4.1): under the propagation mutex (skipped if another thread holds
    it), move the pairs of completed tasks at the queue head into the step's output, in task
    order, until the head task is not completed. A task whose pairs spilled, or that does not
    fit the output, stalls propagation until the step ends (:func:`gather_pairs`). The pair
    count is published before the head (:func:`drain_pairs` reads them the other way)."""
    while True:
        if load_acquire(ctl, STALLED * PAD) or not try_lock(ctl, PROP_LOCK * PAD):
            return
        n_tasks = load_acquire(ctl, PUBLISHED * PAD)
        h = ctl[HEAD * PAD]
        n = ctl[OUT_N * PAD]
        cap = out.shape[1]
        while h < n_tasks and load_acquire(status, h) == COMPLETED:
            k, off, cnt = task_meta[h, M_THREAD], task_meta[h, M_OFF], task_meta[h, M_CNT]
            if k < 0 or n + cnt > cap:
                store_release(ctl, STALLED * PAD, 1)
                break
            copy_cols(out, n, buf[k], off, cnt)
            n += cnt
            h += 1
        store_release(ctl, OUT_N * PAD, n)
        store_release(ctl, HEAD * PAD, h)
        unlock(ctl, PROP_LOCK * PAD)
        # a task completed after the check above saw the mutex held and went on: look again
        if h >= n_tasks or load_acquire(status, h) != COMPLETED:
            return


@njit(cache=True, nogil=True)
def _claim(ctl, stay, keep):
    """Task acquisition (§4.1): the next published task, claimed with a compare-and-swap on
    ``ctl[NEXT]`` (the paper's work queue under a mutex, here one instruction), unless no
    more than ``keep`` are unclaimed (left to the pool's threads while the core's thread
    fetches the next batch); ``-1`` when the step is closed and every task claimed
    (:data:`DONE`), ``-2`` when none is published now and this thread does not ``stay`` for
    more, or has spun ``stay`` cycle-counter ticks for them (:data:`IDLE`). A waiting thread
    spins with ``pause``, then yields its processor
    (:func:`~streamjoin.indexes.blocks.atomics.back_off`)."""
    spins = 0
    start = cycle_count()
    while True:
        if load_acquire(ctl, FAILED * PAD):
            return -1
        t = load_acquire(ctl, NEXT * PAD)
        if t + keep < load_acquire(ctl, PUBLISHED * PAD):
            if atomic_cas(ctl, NEXT * PAD, t, t + 1) == t:
                return t
            continue  # another thread took it
        if load_acquire(ctl, CLOSED * PAD) and t >= load_acquire(ctl, PUBLISHED * PAD):
            return -1
        if keep:
            return -2
        if not stay or (spins >= 64 and cycle_count() - start >= stay):
            return -2
        spins = back_off(spins)


@njit(cache=True, nogil=True)
def run_tasks(thread, stay, keep, sync, cfg, step, window0, window1, probing, buf, out):
    """One thread's share of a step: PIM-Tree §4.1's four steps, task after task, for as long
    as tasks are published (a step takes more while it runs: the module docstring).

    1. *Task acquisition* (:func:`_claim`).
    2. *Result generation*: per stream in the task, read the edge tuple of the probed stream
       (``e = min(edge, OPP of the task's first tuple)``, kept for the whole task: an old
       value only costs a longer scan), probe the shared index and keep the candidates below
       ``e``, then scan the store from ``e`` to each tuple's predecessors; sort the task's
       pairs by (later, earlier) tuple if ``ordered``; store them in this thread's buffer and
       mark the task completed.
    3. *Index update*: insert the task's tuples (locks as the index prescribes), flag them
       indexed, advance the edge tuples (test-and-set).
    4. *Result propagation* (:func:`_propagate`).

    ``stay``: cycle-counter ticks to wait for a task when none is published (a pool thread:
    ``cfg[C_IDLE_TICKS]``), or 0 to return at once (the core's own thread, which feeds the
    step); ``keep``: tasks this thread leaves to the others (the core's thread, so that the
    pool's threads have work while it fetches the next batch). ``sync`` is the thread pool's counters (:mod:`~streamjoin.actors.shared_index.
    thread_pool`; empty with one thread): this kernel publishes the pool's step there, so
    that the other threads start as soon as it runs without the GIL. ``cfg[C_DELAY] > 0``
    waits a random while between the steps (a test hook that forces interleavings).
    ``step``: the arrays the threads share (:class:`Step`); ``window0``/``window1``: the
    windows each stream probes; ``buf``: int64 ``(threads, 3, cap)``, each thread's pairs;
    ``out``: int64 ``(3, cap)``, the step's propagated pairs. Returns ``(status, spill,
    counters)``: :data:`DONE` or :data:`IDLE`, int64 ``(3, n)`` pairs of tasks that did not fit
    this thread's buffer (``task_meta`` locates them, counting this thread's spills of the
    whole step) and int64 ``(WORK,)``.
    """
    publish(sync)  # the pool's threads may start their kernels now (GIL released)
    ctl, edge, first_ref, tup, attrs = step.ctl, step.edge, step.first_ref, step.tup, step.attrs
    ypos, n_y, indexed_flags = step.ypos, step.n_y, step.flags
    status, task_meta, task_work = step.status, step.task_meta, step.task_work
    pub_keys, pub_pos, buf_n, task_start = step.pub_keys, step.pub_pos, step.buf_n, step.task_start
    key_rows = probing.key_rows
    task_size = cfg[C_TASK_SIZE]
    self_join, indexed, ordered = cfg[C_SELF_JOIN] != 0, cfg[C_INDEXED] != 0, cfg[C_ORDERED] != 0
    max_spins = cfg[C_DELAY]
    rng = cfg[C_SEED] * 7919 + thread * 104729 + 1
    n_streams = 1 if self_join else 2
    counters = np.zeros(WORK, dtype=np.int64)
    gs = np.empty((2, task_size), dtype=np.int64)
    n_g = np.zeros(2, dtype=np.int64)
    keys = np.empty((2, task_size), dtype=np.float64)
    sorted_keys = np.empty((2, task_size), dtype=np.float64)
    orders = np.empty((2, task_size), dtype=np.int64)
    refs = np.empty(task_size, dtype=np.int64)
    cand_p = np.empty(64, dtype=np.int64)
    cand_r = np.empty(64, dtype=np.int64)
    pairs = np.empty((5, 256), dtype=np.int64)
    spill = np.empty((3, 64), dtype=np.int64)
    n_spill = 0
    spilled = step.spill_n[thread * PAD]  # by this thread's earlier calls in the step
    path = new_path()
    while True:
        t = _claim(ctl, stay, keep)  # 1. task acquisition
        if t < 0:
            break
        rng = _delay(rng, max_spins)
        a0, a1 = task_start[t], task_start[t + 1]
        work = task_work[t]
        work[W_TUPLES] = a1 - a0
        n_g[:] = 0
        for g in range(a0, a1):
            x = tup[T_STREAM, g]
            gs[x, n_g[x]] = g
            n_g[x] += 1
        at = a0
        for x in range(2):
            m = n_g[x]
            # the tuples' keys in (key, ref) order: probes share descents, inserts walk the
            # subindexes in order (refs ascend with positions, so a stable sort suffices);
            # published for the tails of later tasks (_join_tail)
            for a in range(m):
                keys[x, a] = attrs[key_rows[x], gs[x, a]]
            stable_order_into(keys[x, :m], orders[x, :m])
            for a in range(m):
                sorted_keys[x, a] = keys[x, orders[x, a]]
                pub_keys[at + a] = sorted_keys[x, a]
                pub_pos[at + a] = gs[x, orders[x, a]]
            at += m
        task_meta[t, M_N0] = n_g[0]
        store_release(status, t, ACTIVE)
        n_pairs = np.int64(0)  # (a literal 0 compiled _join_tuples a second time)
        for x in range(2):  # 2. result generation
            m = n_g[x]
            if m == 0:
                continue
            y = x if self_join else 1 - x
            e_ref = min(first_ref[y] + load_acquire(edge, y * PAD), tup[T_OPP, gs[x, 0]])
            window = window0 if y == 0 else window1
            probers = Probers(gs[x], orders[x, :m], sorted_keys[x, :m], m)
            orient = EITHER if self_join else (R_PROBES if x == 0 else S_PROBES)
            side = Side(x, y, e_ref, orient, not self_join and x == 0)
            cand_p, cand_r, pairs, n_pairs = _join_tuples(
                probers, side, step, window, indexed, probing, cand_p, cand_r, pairs, n_pairs, work
            )
            if indexed:
                pairs, n_pairs = _join_tail(
                    probers, side, t, step, window, probing.conds, pairs, n_pairs, work
                )
        if ordered and n_pairs > 1:  # by the later tuple, then the earlier (docs/design.md §1)
            by_earlier = np.argsort(pairs[4, :n_pairs], kind="mergesort")
            by_later = np.argsort(pairs[3, :n_pairs][by_earlier], kind="mergesort")
            perm = by_earlier[by_later]
            held = pairs[:3, :n_pairs].copy()
            for a in range(3):
                for j in range(n_pairs):
                    pairs[a, j] = held[a, perm[j]]
        work[W_PAIRS] = n_pairs
        off = buf_n[thread * PAD]
        if off + n_pairs <= buf.shape[2]:
            copy_cols(buf[thread], off, pairs, 0, n_pairs)
            buf_n[thread * PAD] = off + n_pairs
            task_meta[t, M_THREAD] = thread
            task_meta[t, M_OFF] = off
        else:  # this thread's buffer is full: keep them here, the step's end gathers them
            while n_spill + n_pairs > spill.shape[1]:
                bigger = np.empty((3, 2 * spill.shape[1] + n_pairs), dtype=np.int64)
                copy_cols(bigger, 0, spill, 0, n_spill)
                spill = bigger
            copy_cols(spill, n_spill, pairs, 0, n_pairs)
            task_meta[t, M_THREAD] = -1 - thread
            task_meta[t, M_OFF] = spilled + n_spill
            n_spill += n_pairs
        task_meta[t, M_CNT] = n_pairs
        store_release(status, t, COMPLETED)
        rng = _delay(rng, max_spins)
        if indexed:  # 3. index update
            for x in range(n_streams):
                m = n_g[x]
                if m == 0:
                    continue
                for a in range(m):
                    refs[a] = tup[T_OWN, gs[x, orders[x, a]]]
                state = window0.state if x == 0 else window1.state
                work[W_WAITS] += insert_shared(state, sorted_keys[x, :m], refs[:m], path)
                work[W_INSERTED] += m
                for a in range(m):
                    store_release(indexed_flags, gs[x, a], 1)
            rng = _delay(rng, max_spins)
            _advance_edge(ctl, edge, indexed_flags, ypos, n_y, n_streams)
        rng = _delay(rng, max_spins)
        _propagate(ctl, status, task_meta, buf, out)  # 4. result propagation
        for w in range(WORK):
            counters[w] += work[w]
    step.spill_n[thread * PAD] = spilled + n_spill
    return (DONE if t == -1 else IDLE), spill[:, :n_spill], counters


@njit(cache=True, nogil=True)
def gather_pairs(ctl, task_meta, buf, spill, spill_base, out, start):
    """The step's pairs in task order from pair ``start`` on (those before have left): those
    propagated already (``out[:, start:OUT_N]``), then each later task's from its thread's
    buffer or from ``spill`` (the threads' spills one after another; thread ``k``'s start at
    ``spill_base[k]``). Once every thread ended its share. int64 ``(3, n)``."""
    n_tasks = ctl[PUBLISHED * PAD]
    n = ctl[OUT_N * PAD] - start
    total = n
    for t in range(ctl[HEAD * PAD], n_tasks):
        total += task_meta[t, M_CNT]
    res = np.empty((3, total), dtype=np.int64)
    copy_cols(res, 0, out, start, n)
    for t in range(ctl[HEAD * PAD], n_tasks):
        k, off, cnt = task_meta[t, M_THREAD], task_meta[t, M_OFF], task_meta[t, M_CNT]
        if k >= 0:
            copy_cols(res, n, buf[k], off, cnt)
        else:
            at = spill_base[-1 - k] + off
            copy_cols(res, n, spill, at, cnt)
        n += cnt
    return res


def callee_jobs(step: Step, window: Window, probing: Probing) -> list:
    """:func:`_join_tuples` and :func:`_join_tail` (most of compiling :func:`run_tasks`)
    with arguments of the types ``run_tasks`` passes them in a step like ``step`` over
    ``window``: ``(dispatcher, example_args)`` pairs for :mod:`streamjoin.compile_ahead`."""
    ints, keys = np.zeros((2, 8), dtype=np.int64), np.zeros((2, 8))
    probers = Probers(ints[0], ints[1, :8], keys[0, :8], 8)
    side = Side(0, 1, 0, R_PROBES, True)
    cands = np.empty(64, dtype=np.int64), np.empty(64, dtype=np.int64)
    pairs, work = np.empty((5, 256), dtype=np.int64), step.task_work[0]
    n_pairs, t = np.int64(0), np.int64(0)
    return [
        (_join_tuples, (probers, side, step, window, True, probing, *cands, pairs, n_pairs, work)),
        (_join_tail, (probers, side, t, step, window, probing.conds, pairs, n_pairs, work)),
    ]
