"""Kernels over runs of ``(key, ref)`` items sorted by ``(key, ref)``, shared by the tree indexes.

A *run* is a pair of parallel arrays ``keys`` (float64) and ``refs`` (int64) in ascending
``(key, ref)`` order: a B+-tree leaf, or the whole leaf level of an immutable B+-tree. The tree
indexes descend with :func:`lower_bound`, collect matches with :func:`scan_run` and rebuild
immutable levels with :func:`merge_runs`; batched searches hide memory latency with
:func:`prefetch`.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from streamjoin.indexes.base import in_band
from streamjoin.indexes.blocks.no_refcount import njit_no_refcount


@njit_no_refcount
def lower_bound(keys, start, stop, x):
    """First position in ``[start, stop)`` with ``keys[pos] >= x`` (``stop`` if none).

    ``keys[start:stop]`` must be non-decreasing. O(log(stop - start)).

    Small helpers like this one that take arrays are compiled without reference counting
    (``_nrt=False``: they allocate nothing) and left for LLVM to inline, not numba
    (``inline="always"`` binds each array argument to a variable of the caller, an atomic
    increment and decrement per call that numba could not prune inside a probe's loop).
    """
    while start < stop:
        mid = (start + stop) >> 1
        if keys[mid] < x:
            start = mid + 1
        else:
            stop = mid
    return start


@njit_no_refcount
def lower_bound_row(keys, row, start, stop, x):
    """:func:`lower_bound` in row ``row`` of the 2-d ``keys``, read in place: a row view
    (``keys[row]``) in a loop costs two atomic reference-count updates each time numba cannot
    prove them redundant (a tree descent did that at every level)."""
    while start < stop:
        mid = (start + stop) >> 1
        if keys[row, mid] < x:
            start = mid + 1
        else:
            stop = mid
    return start


def largest(a):
    """(jitted) The largest value of ``a``'s dtype, above every key: ``+inf`` for float64
    keys, ``2**64 - 1`` for uint64 items (compact layouts)."""
    raise NotImplementedError


@overload(largest)
def _largest_ol(a):
    if a.dtype == types.uint64:
        top = np.uint64(2**64 - 1)
        return lambda a: top
    return lambda a: np.inf


@intrinsic
def prefetch(typingctx, arr, i):
    """Hint the CPU to load the cache line of element ``i`` of the C-contiguous ``arr``, counted
    flat (LLVM ``llvm.prefetch``: read, keep in all cache levels). No effect on results."""

    def codegen(context, builder, sig, args):
        ptr = builder.gep(
            context.make_array(sig.args[0])(context, builder, args[0]).data, [args[1]]
        )
        i8p = ir.PointerType(ir.IntType(8))
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8p] + [ir.IntType(32)] * 3)
        )
        builder.call(fn, [builder.bitcast(ptr, i8p), *(ir.IntType(32)(v) for v in (0, 3, 1))])
        return context.get_dummy_value()

    return types.void(arr, i), codegen


#: Probes a tree's batch probe walks down together, a level at a time: each level's nodes are
#: fetched for the whole group before any is searched, so the group's cache misses overlap
#: instead of each probe waiting for its own (group prefetching: Chen, Ailamaki, Gibbons and
#: Mowry, "Improving hash join performance through prefetching", ICDE 2004; Kocberber et al.,
#: "Asynchronous memory access chaining", VLDB 2015).
PROBE_GROUP = 16


@njit_no_refcount
def prefetch_range(arr, start, stop):
    """:func:`prefetch` the cache lines of flat elements ``[start, stop)`` of 8-byte ``arr``."""
    for i in range(start, stop, 8):
        prefetch(arr, i)


@njit_no_refcount
def scan_run(keys, refs, start, stop, key, lo, hi, vhi, min_ref, probe, out_p, out_r, n):
    """Append ``(probe, ref)`` for each item of ``[start, stop)`` in the probe band.

    Scans in key order and stops at the first key above ``vhi`` (the top of the widened
    interval from :func:`~streamjoin.indexes.base.key_range`); every scanned item is tested
    exactly with :func:`~streamjoin.indexes.base.in_band`, and items with ``ref < min_ref``
    (known to be expired) are skipped. ``out_p``/``out_r`` hold ``n`` matches so far.

    Returns ``(n, done)``: the new count, and whether a key above ``vhi`` ended the scan.
    Matches beyond the outputs' room are counted, not written: a caller whose count passed
    ``out_p.shape[0]`` grows both and scans its probe again (:func:`~streamjoin.indexes.base.
    grow`). The outputs are never replaced here, because an array a loop reassigns costs two
    atomic reference-count updates per call, at every key of a probe batch
    (:mod:`~streamjoin.indexes.blocks.no_refcount`). O(stop - start).
    """
    room = out_p.shape[0]
    for j in range(start, stop):
        v = keys[j]
        if v > vhi:
            return n, True
        if in_band(v, key, lo, hi) and refs[j] >= min_ref:
            if n < room:
                out_p[n] = probe
                out_r[n] = refs[j]
            n += 1
    return n, False


@njit(cache=True, nogil=True)
def merge_runs_into(a_keys, a_refs, b_keys, b_refs, min_ref, keys, refs):
    """Merge two sorted runs into ``keys``/``refs``, dropping items with ``ref < min_ref``.

    Every ref of ``b`` must be above every ref of ``a`` (``b`` holds later arrivals), so equal
    keys take ``a`` first and the result is sorted by ``(key, ref)``. ``keys``/``refs`` need
    room for ``len(a) + len(b)`` items: an item is written before the test that keeps it
    (branch-free: which items expired is random in key order). Returns how many were kept.
    O(len(a) + len(b)).
    """
    na, nb = a_keys.shape[0], b_keys.shape[0]
    i = k = 0
    for j in range(nb):
        bk = b_keys[j]
        while i < na and a_keys[i] <= bk:  # the run of a up to the next b item
            keys[k] = a_keys[i]
            refs[k] = a_refs[i]
            k += a_refs[i] >= min_ref
            i += 1
        keys[k] = bk
        refs[k] = b_refs[j]
        k += b_refs[j] >= min_ref
    for q in range(i, na):
        keys[k] = a_keys[q]
        refs[k] = a_refs[q]
        k += a_refs[q] >= min_ref
    return k


def merge_runs(
    a_keys: np.ndarray, a_refs: np.ndarray, b_keys: np.ndarray, b_refs: np.ndarray, min_ref: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`merge_runs_into` new ``(keys, refs)`` arrays, views of the surviving length (a
    copy to the exact length would stream the whole run a second time; the slack is at most
    what expired). O(len(a) + len(b))."""
    n = len(a_keys) + len(b_keys)
    keys, refs = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
    k = merge_runs_into(a_keys, a_refs, b_keys, b_refs, min_ref, keys, refs)
    return keys[:k], refs[:k]
