"""``bisort``: PanJoin's Buffered Indexed Sort (§III-D, §III-E) in a chain of subwindows.

A subwindow holds

- the *main array*, sorted by ``(key, ref)``;
- an *insertion buffer* of at most ``B`` items, also sorted by ``(key, ref)``;
- the *index array*, which samples every ``stride = ceil(M / P)``-th key of the main array
  (``M`` items), so *partition* ``j`` is ``main[j · stride : (j + 1) · stride]``.

Inserts merge each sorted batch into the buffer; a batch that does not fit, or that fills the
subwindow, is merged with the buffer and the result merged into the main array in one
O(M + B) pass, and the index array is resampled (§III-D, §III-E). The paper's buffer is
unsorted and sorted when it is merged; keeping it sorted costs O(B) per batch in cache, and
lets probes search the buffer like the main array instead of sorting it for every probe batch.
A larger ``B`` saves merges, but every run a probe batch visits costs it a pass (the buffer
and the main array are two), and every merge moves the whole main array, so the window index
defaults to ``B = N_Sub / 32`` (the paper's 1K would make each item of a 2^20 subwindow move
about 512 times; N_Sub / 16 and / 8 were no faster at 32K batches). A full subwindow never
changes again and is one run. With ``layout="compact"`` a full subwindow is then packed into
8-byte items (:meth:`BISort.insert`), coded from its own keys.

A probe batch arrives sorted. The items a probe key can match form one range of the main
array, those in its widened key interval ``[vlo, vhi]``: the ``<id_start, id_end>`` record of
§III-D, which BI-Sort copies out (an exact test drops the rounding-margin items at the ends).
How it finds the starts depends on the batch's density (:func:`_locate_group`):

- a *sparse* batch (more than ``_SWEEP_GAP`` items per probe) finds each probe's partition in
  the index array, counted forward from the previous probe's (the index stays in cache), and
  inside it reads a few lines at the position interpolated between the partition's two
  samples, for a group of probes at a time: the group's lines are prefetched before any is
  read, so their cache misses overlap. The interpolation is the piecewise-linear model of
  the keys' distribution that the samples are (as learned indexes use one: Kraska, Beutel,
  Chi, Dean and Polyzotis, *The Case for Learned Index Structures*, SIGMOD 2018, §3); where
  it guesses wrong (skewed keys), a rebounding search (§III-E) goes on from the lines read.
  O(1) per probe on smooth keys, O(log(stride)) at worst;
- a *dense* batch sweeps the run merge-like (§III-E's batch mode): each start, and its end
  with it, is counted forward from the previous start among the next ``_SWEEP_AHEAD`` items,
  vectorised and without branches, with a rebounding search only past them
  (:func:`_sweep_step`): O(M + m) for M items and m probes, a sequential pass the hardware
  prefetches, where a search would wait on a dependent cache miss per level.

An end not found among the keys its start's search read is counted forward from the previous
end (ends only move forward); equal probe keys find their range again (§III-E). All
subwindows of a window append to one pair of outputs.

Why one file of ~620 lines: the insert (merge-back), locate and probe kernels all read one
array layout (sorted run, group index, samples and stride, :class:`BISortArrays`), and the two
classes at the end hold it in a chain of subwindows; apart, a change to the
layout would have to be made in step in several files.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.checks import MAX_THREADS
from streamjoin.indexes.base import copy_prefix, grow, register
from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.blocks.key_codes import (
    REF_SPAN,
    bounds_for,
    checked_ref_base,
    fit_final,
    item_codes,
    item_in_band,
    item_ref,
    item_refs,
    pack_items_into,
)
from streamjoin.indexes.blocks.sorted_runs import prefetch
from streamjoin.indexes.panjoin.subwindows import (
    MAX_PARTITIONS,
    MAX_SUBWINDOW,
    SubwindowIndex,
    SubwindowStore,
    int_option,
    left_of,
    rebound_search,
)
from streamjoin.modes import Layout

# slots of BISortArrays.meta
MAIN, BUFFERED, SAMPLES, STRIDE, REF_BASE = range(5)


class BISortArrays(NamedTuple):
    """State of one BI-Sort subwindow; kernels mutate it in place.

    The main array is *wide* (``keys`` float64, ``refs`` int64) while the subwindow fills, and
    *compact* once a full subwindow of the compact layout is packed (``keys`` uint64 items,
    refs counted from ``meta[REF_BASE]``; ``refs`` is the same array, the buffer empty);
    the probe kernels specialise on its dtype, inserts see wide arrays only."""

    #: main array (capacity,), in the first ``MAIN``: ascending by (key, ref), or compact items
    #: ascending by code (items of one code in any order: searches look at codes only)
    keys: np.ndarray
    #: int64 (capacity,) refs, or ``keys`` itself when compact
    refs: np.ndarray
    #: float64 (B,): insertion buffer keys, ascending by (key, ref) in the first ``BUFFERED``
    #: (empty once packed)
    buf_keys: np.ndarray
    #: int64 (B,)
    buf_refs: np.ndarray
    #: (P,) of the main array's dtype (``(SAMPLES,)`` once packed): ``index[j] = keys[j ·
    #: STRIDE]`` for ``j < SAMPLES``
    index: np.ndarray  # type: ignore[assignment]  # shadows tuple.index: the kernels' name for it
    #: int64 (5,): items in the main array, items buffered, index samples, stride, and the
    #: ref that compact refs count from
    meta: np.ndarray
    #: float64 (2,): the key code's ``base`` and ``scale`` (compact; NaN until packed)
    coder: np.ndarray


@njit(cache=True, nogil=True)
def to_buffer(m, b, n, buffer_size, capacity):
    """Whether a batch of ``n`` items goes into the buffer (holding ``b`` of ``buffer_size``)
    rather than into the main array (holding ``m``): if it fits and does not fill the
    subwindow (:func:`insert_bisort`)."""
    return b + n <= buffer_size and m + b + n < capacity


@njit(cache=True, nogil=True)
def merge_back(dst_keys, dst_refs, n, src_keys, src_refs):
    """Merge the sorted run ``src`` into the sorted ``dst[:n]`` in place, from the back.

    ``dst`` has room for ``n + len(src)`` items. On equal keys ``src`` items go after ``dst``
    items, so merging newer items into older ones keeps equal keys in ref order. No item of
    ``dst`` is overwritten before it is read: the write position stays above the read
    position. O(n + len(src)).
    """
    i = n - 1
    j = src_keys.shape[0] - 1
    w = n + j
    while j >= 0:
        if i >= 0 and dst_keys[i] > src_keys[j]:
            dst_keys[w] = dst_keys[i]
            dst_refs[w] = dst_refs[i]
            i -= 1
        else:
            dst_keys[w] = src_keys[j]
            dst_refs[w] = src_refs[j]
            j -= 1
        w -= 1


@njit(cache=True, nogil=True)
def insert_bisort(t, keys, refs):
    """Add a sorted batch to a BI-Sort subwindow (§III-D, §III-E).

    The batch is merged into the sorted insertion buffer if it fits and does not fill the
    subwindow. Otherwise buffer and batch are merged, the result is merged into the main array,
    and the index array is resampled: a full subwindow, which never changes again, is one run,
    so each later probe batch pays one sweep or search of it, not two. ``keys`` float64 (n,)
    ascending (stable, so equal keys are in ref order), ``refs`` int64 (n,); ``t`` wide. O(B +
    n) when buffered (in cache), else O(M + B + n + P).
    """
    m, b = t.meta[MAIN], t.meta[BUFFERED]
    n = keys.shape[0]
    if to_buffer(m, b, n, t.buf_keys.shape[0], t.keys.shape[0]):
        merge_back(t.buf_keys, t.buf_refs, b, keys, refs)
        t.meta[BUFFERED] = b + n
        return
    if b == 0:  # nothing buffered: the batch merges straight into the main array (§III-E)
        merge_back(t.keys, t.refs, m, keys, refs)
    else:
        buf_keys = np.empty(b + n)
        buf_refs = np.empty(b + n, dtype=np.int64)
        copy_prefix(buf_keys, t.buf_keys, b)
        copy_prefix(buf_refs, t.buf_refs, b)
        merge_back(buf_keys, buf_refs, b, keys, refs)
        merge_back(t.keys, t.refs, m, buf_keys, buf_refs)
    m += b + n
    t.meta[MAIN] = m
    t.meta[BUFFERED] = 0
    stride = max(1, -(-m // t.index.shape[0]))  # every ceil(M/P)-th key: at most P samples
    samples = -(-m // stride)
    for j in range(samples):
        t.index[j] = t.keys[j * stride]
    t.meta[SAMPLES] = samples
    t.meta[STRIDE] = stride


#: Probes whose searches run interleaved: each one's lines are prefetched before any of them
#: is read (on 2**20 items, 128 took 0.90-0.95x the time of 32; a lag of 8-64 probes between
#: a probe's prefetch and its read, instead of groups, was no faster).
_GROUP = 128
#: Items a probe of a searched run reads at its interpolated position, from ``_GUESS_BACK``
#: before it.
_GUESS_AHEAD = 16
_GUESS_BACK = 8
#: Samples after the previous probe's in which a probe counts its partition first.
_INDEX_AHEAD = 16
#: Items per probe up to which a run is swept (:func:`_forward`) rather than searched: on 2**20
#: uniform items the sweep took 0.7x the search's time at 32 items per probe, about the same
#: at 64, 1.4x at 128.
_SWEEP_GAP = 48
#: Items after the previous start in which the sweep counts a probe's start: uniform gaps of g
#: items go past them with chance ``exp(-64 / g)`` (a rebounding search then); 32 was slower
#: (more of those), 128 no faster.
_SWEEP_AHEAD = 64
#: Items after the previous end in which a probe counts its end first.
_END_AHEAD = 8
#: Items per sample of the index the probes build over the sorted buffer when they search it.
_BUFFER_STRIDE = 64


@njit(cache=True, nogil=True)
def _search(arr, start, stop, hint, x, upper):
    """:func:`~streamjoin.indexes.panjoin.subwindows.rebound_search`, called rather than
    inlined: the searches' rare way on where the keys read at a guess or ahead did not hold
    the answer. numba types an inlined function again at each call site, and four inlined
    copies made a first run's compile of the probe far longer (docs/performance.md)."""
    return rebound_search(arr, start, stop, hint, x, upper)


@njit(cache=True, nogil=True, inline="always")
def _group_starts(keys, m, index, samples, stride, x, y, low, base, count, ends):
    """Set ``base[g]`` to the first position of ``keys[:m]`` with key ``>= x[g]``, for the
    ascending ``x`` (at most ``_GROUP``) whose partitions are ``>= low``; ``ends[g]`` to the
    first with key ``> y[g]`` where the search read it, else -1. Returns the last probe's
    partition.

    §III-D's two searches -- the index array for the partition, then inside the partition.
    Each probe's partition is counted forward from the previous probe's in the index array
    (:func:`_forward`; a rebounding search, §III-E, past ``_INDEX_AHEAD`` samples). Inside it,
    the start is guessed by interpolating between the partition's two samples (in cache), and
    the ``_GUESS_AHEAD`` keys from ``_GUESS_BACK`` before the guess are prefetched for the whole
    group before any probe reads them (:func:`_from_guess`): the group's cache misses overlap,
    two or three lines a probe, where a binary search of the partition waited on a line at each
    of its first levels (on 2^20 uniform keys in partitions of 128, the guess's keys held the
    start for 92% of the probes). ``count`` is scratch. O(size · (1 + span / size)) on smooth
    keys, O(size · (log(span) + log(stride))) at worst.
    """
    size = x.shape[0]
    j = low
    for g in range(size):
        j = _forward(index, samples, j, x[g], False, _INDEX_AHEAD)  # the first sample >= x
        # keys[(j-1)·stride] < x <= keys[j·stride]: the start is in ((j-1)·stride, j·stride];
        # searching from (j-1)·stride keeps every range non-empty and in [0, m)
        b = max(j - 1, 0) * stride
        e = min(j * stride, m) if j > 0 else 0
        guess = b
        if 0 < j < samples:  # both ends sampled (in cache): interpolate between them
            left, right = float(index[np.uint64(j - 1)]), float(index[np.uint64(j)])
            frac = (float(x[g]) - left) / (right - left)
            if frac > 0.0 and frac < 1.0:  # False for NaN (equal or infinite ends)
                guess = b + int(frac * (e - b))
        s = max(b, guess - _GUESS_BACK)
        base[g] = s
        count[g] = b
        for i in range(s, min(s + _GUESS_AHEAD, m), 8):  # 2-3 lines
            prefetch(keys, i)
        prefetch(keys, min(s + _GUESS_AHEAD, m) - 1)
    for g in range(size):
        b = count[g]
        base[g], ends[g] = _from_guess(keys, m, b, base[g], min(b + stride, m), x[g], y[g])
    return j


@njit(cache=True, nogil=True, inline="always")
def _from_guess(keys, m, b, s, e, x, y):
    """``(start, end)``: the first position in ``[b, e]`` with key ``>= x``, where ``keys[b]
    < x`` or ``b`` is 0 (then ``e > 0``), and ``keys[e] >= x`` or ``e`` is ``m``, the end of the
    run, from ``s`` in ``[b, e]``: the interpolated guess less a margin; and the first
    position with key ``> y`` (``y >= x``) if it lies among the keys read, else -1.

    The keys left of ``x`` and those not right of ``y`` among the ``_GUESS_AHEAD`` at ``s``
    are counted without branches, as in :func:`_forward`; a rebounding search (§III-E) takes
    over where the start lies outside them."""
    if s > b and not keys[np.uint64(s)] < x:
        return _search(keys, b, s, s, x, False), -1
    c = 0
    d = 0
    stop = min(s + _GUESS_AHEAD, e)
    for i in range(s, stop):
        v = keys[np.uint64(i)]
        c += v < x
        d += v <= y
    # every key before s is < x <= y: the counts are offsets from s
    end = s + max(c, d) if s + d < stop or stop == m else -1
    if s + c < stop or stop == e:
        return s + c, end
    return _search(keys, stop, e, stop, x, False), end


@njit(cache=True, nogil=True, inline="always")
def _forward(keys, m, pos, x, upper, ahead):
    """First position ``>= pos`` of ``keys[:m]`` with key ``> x`` (``upper``) or ``>= x``;
    every key before ``pos`` must be left of ``x``.

    The merge-like step of §III-E for a sorted batch: the answer is usually close after the
    previous one, so the keys left of ``x`` among the ``ahead`` items at ``pos`` are counted
    (sorted, so the count is the offset; a vectorised loop without branches); only if all are
    left of ``x`` does a rebounding search (§III-E, Fig. 6) go on from there.
    O(ahead + log(1 + answer - pos)).
    """
    if pos + ahead <= m:
        c = 0
        for j in range(ahead):
            c += left_of(keys[np.uint64(pos + j)], x, upper)
        if c < ahead:
            return pos + c
        pos += ahead
    return _search(keys, pos, m, pos, x, upper)


@njit(cache=True, nogil=True, inline="always")
def _sweep_step(keys, m, pos, x, y):
    """``(start, end)`` of a dense batch's probe in ``keys[:m]``: the first position ``>= pos``
    with key ``>= x``, where every key before ``pos`` is left of ``x`` (the previous probe's
    start), and the first with key ``> y`` (``y >= x``) if it lies among the
    ``_SWEEP_AHEAD`` keys at ``pos``, else -1.

    :func:`_forward` for both bounds at once: one pass over the keys, and one chain of
    dependent steps through the batch instead of two."""
    if pos + _SWEEP_AHEAD <= m:
        c = 0
        d = 0
        for j in range(_SWEEP_AHEAD):
            v = keys[np.uint64(pos + j)]
            c += v < x
            d += v <= y
        if c < _SWEEP_AHEAD:
            return pos + c, pos + max(c, d) if d < _SWEEP_AHEAD else -1
        pos += _SWEEP_AHEAD
    return _search(keys, pos, m, pos, x, False), -1


@njit(cache=True, nogil=True, inline="always")
def _sweeps(m, probes):
    """Whether a run of ``m`` items is swept rather than searched by ``probes`` sorted keys."""
    return m <= _SWEEP_GAP * probes


class SortedRun(NamedTuple):
    """A sorted run as the probe kernels search it: a BI-Sort main array or its buffer."""

    #: float64 keys, or a compact main array's uint64 items, ascending; ``[:m]`` held
    keys: np.ndarray
    #: int64: their refs (unused for compact items, which hold them)
    refs: np.ndarray
    #: items held
    m: int
    #: keys' dtype: the index array, ``keys`` sampled every ``stride`` items, ``[:samples]``
    #: used (unused when a batch sweeps the run)
    sampled: np.ndarray
    samples: int
    stride: int


@njit(cache=True, nogil=True, inline="always")
def _locate_group(run, vlo, vhi, g0, sweep, low, start, end, base, count, ends):
    """``<id_start, id_end>`` records of probes ``g0 .. g0 + _GROUP`` (§III-D) in ``run``
    (:class:`SortedRun`) into ``base``/``ends``; returns the hints ``(low, start, end)`` for
    the next group.

    Starts are swept from the previous start (:func:`_forward`) if ``sweep`` -- a dense batch,
    whose consecutive starts are a few items apart -- else searched by :func:`_group_starts`
    from partition ``low`` on, which also counts the ends among the keys it read. Any other end
    is counted forward from the previous one (ends only move forward; equal probe keys find
    their range again, §III-E), and the refs line of each start is prefetched for the copy that
    follows (without that prefetch a dense batch took 1.6x as long).
    """
    keys, refs, m, index, samples, stride = run
    size = min(_GROUP, vlo.shape[0] - g0)
    if sweep:
        for g in range(size):
            start, ends[g] = _sweep_step(keys, m, start, vlo[g0 + g], vhi[g0 + g])
            base[g] = start
    else:
        low = _group_starts(
            keys,
            m,
            index,
            samples,
            stride,
            vlo[g0 : g0 + size],
            vhi[g0 : g0 + size],
            low,
            base,
            count,
            ends,
        )
    for g in range(size):
        prefetch(refs, base[g])
        if ends[g] < 0:  # not among the keys its start's search read
            ends[g] = _forward(keys, m, max(end, base[g]), vhi[g0 + g], True, _END_AHEAD)
        end = ends[g]
    return low, start, end


@njit(cache=True, nogil=True)
def locate_run(run, vlo, vhi, starts, ends):
    """``<id_start, id_end>`` records of a sorted probe batch in a sorted run (§III-D).

    Sets ``[starts[i], ends[i])`` to the items of ``run.keys[:m]`` with ``vlo[i] <= key <=
    vhi[i]`` (:class:`SortedRun`). :func:`_locate_group`, ``_GROUP`` probes at a time. For p
    probes O(p · (log(1 + samples / p) + log(stride))) searched, O(m + p) swept (when m / p
    <= ``_SWEEP_GAP``, so O(p) then).
    """
    if run.m == 0:
        starts[:] = 0
        ends[:] = 0
        return
    sweep = _sweeps(run.m, vlo.shape[0])
    count = np.empty(_GROUP, dtype=np.int64)
    low = start = end = 0
    for g0 in range(0, vlo.shape[0], _GROUP):
        low, start, end = _locate_group(
            run, vlo, vhi, g0, sweep, low, start, end, starts[g0:], count, ends[g0:]
        )


@njit(cache=True, nogil=True)
def probe_run(run, probes, vlo, vhi, lo, hi, min_ref, out_p, out_r, n, ref_base):
    """Append the pairs ``(i, ref)`` of a sorted run (:class:`SortedRun`) to
    ``out_p[:n]``/``out_r[:n]``.

    The items of ``keys[:m]``/``refs[:m]`` with ``lo <= key - probes[i] <= hi`` and ``ref >=
    min_ref``, as :func:`locate_run` finds them, copied out right after each group's search
    while its keys are in cache (their refs prefetched meanwhile); each candidate is stored and
    kept by advancing the count (no branch on the exact test). A run of compact items is
    searched with item bounds (``vlo``/``vhi`` from
    :func:`~streamjoin.indexes.blocks.key_codes.bounds_for`) and returns every
    item in them, refs counted from ``ref_base``: a superset of the band's items that the caller
    refines. The outputs grow (doubling) when a group's candidates do not fit: at most a few
    times per batch. Returns ``(out_p, out_r, n)``. Complexity as :func:`locate_run`, plus
    O(candidates).
    """
    keys, refs, m = run.keys, run.refs, run.m
    if m == 0:
        return out_p, out_r, n
    sweep = _sweeps(m, vlo.shape[0])
    base = np.empty(_GROUP, dtype=np.int64)
    count = np.empty(_GROUP, dtype=np.int64)
    ends = np.empty(_GROUP, dtype=np.int64)
    low = start = end = 0
    for g0 in range(0, vlo.shape[0], _GROUP):
        low, start, end = _locate_group(
            run, vlo, vhi, g0, sweep, low, start, end, base, count, ends
        )
        size = min(_GROUP, vlo.shape[0] - g0)
        candidates = 0
        for g in range(size):
            candidates += ends[g] - base[g]
        if n + candidates > out_p.shape[0]:
            out_p = grow(out_p[:n], n + candidates)
            out_r = grow(out_r[:n], n + candidates)
        for g in range(size):
            i = g0 + g
            key = probes[i]
            for j in range(base[g], ends[g]):
                v = keys[j]
                r = item_ref(v, refs[j], ref_base)
                out_p[n] = i
                out_r[n] = r
                n += (r >= min_ref) & item_in_band(v, key, lo, hi)
    return out_p, out_r, n


@njit(cache=True, nogil=True, inline="always")
def _main_run(t):
    """The main array of BI-Sort subwindow ``t`` as a :class:`SortedRun`."""
    return SortedRun(t.keys, t.refs, t.meta[MAIN], t.index, t.meta[SAMPLES], t.meta[STRIDE])


@njit(cache=True, nogil=True)
def locate_bisort(t, vlo, vhi):
    """Main-array ranges of a sorted probe batch: the ``<id_start, id_end>`` records of §III-D.

    ``[starts[i], ends[i])`` holds exactly the main-array items with ``vlo[i] <= key <=
    vhi[i]`` (compact: whose codes are those of keys in it): the matches of probe i plus
    rounding-margin items (and expired ones), which an exact test drops when pairs are needed
    (:func:`locate_run`). ``vlo``/``vhi`` float64 (m,)
    from :func:`~streamjoin.indexes.panjoin.subwindows.band_bounds`. Returns ``starts, ends`` int64
    (m,).
    """
    starts = np.empty(vlo.shape[0], dtype=np.int64)
    ends = np.empty(vlo.shape[0], dtype=np.int64)
    blo, bhi = bounds_for(t.keys, vlo, vhi, t.coder)
    locate_run(_main_run(t), blo, bhi, starts, ends)
    return starts, ends


@njit(cache=True, nogil=True)
def append_bisort(t, keys, vlo, vhi, lo, hi, min_ref, out_p, out_r, n):
    """Append the items of a BI-Sort subwindow with ``lo <= item - keys[i] <= hi`` and ``ref >=
    min_ref`` as pairs ``(i, ref)`` to ``out_p[:n]``/``out_r[:n]``; returns ``(out_p, out_r, n)``
    (grown if the pairs did not fit). From a compact main array, every item whose key code is
    in a probe's code range is a pair (a superset, :mod:`~streamjoin.indexes.blocks.key_codes`).

    ``keys`` float64 (m,) ascending; ``vlo``/``vhi`` from
    :func:`~streamjoin.indexes.panjoin.subwindows.band_bounds`. The main array and the sorted buffer
    are probed alike (:func:`probe_run`; a sparse batch searches the buffer through an index
    array sampled here). O(m · log(1 + (M + B) / m) + B / 64 + candidates), where candidates
    are the items inside the widened intervals (a run with at most ``_SWEEP_GAP`` items per
    probe is swept in O(m)).
    """
    blo, bhi = bounds_for(t.keys, vlo, vhi, t.coder)
    out_p, out_r, n = probe_run(
        _main_run(t),
        keys,
        blo,
        bhi,
        lo,
        hi,
        min_ref,
        out_p,
        out_r,
        n,
        t.meta[REF_BASE],
    )
    b = t.meta[BUFFERED]
    if b > 0:  # dense batches sweep the buffer; sparse ones search it by an index built here
        index = (
            t.buf_keys[:0] if _sweeps(b, keys.shape[0]) else t.buf_keys[:b:_BUFFER_STRIDE].copy()
        )
        # the stride an int64, as the main array's: the constant would be typed as a literal
        # and compile probe_run a second time (3-6 s of a first run)
        buffer = SortedRun(
            t.buf_keys, t.buf_refs, b, index, index.shape[0], np.int64(_BUFFER_STRIDE)
        )
        out_p, out_r, n = probe_run(
            buffer,
            keys,
            vlo,
            vhi,
            lo,
            hi,
            min_ref,
            out_p,
            out_r,
            n,
            np.int64(0),
        )
    return out_p, out_r, n


@njit(cache=True, nogil=True)
def probe_bisort(t, keys, vlo, vhi, lo, hi, min_ref):
    """Items of a BI-Sort subwindow with ``lo <= item - keys[i] <= hi`` and ``ref >= min_ref``,
    as ``(i, refs)`` int64 (:func:`append_bisort` into new arrays). Same complexity."""
    size = 2 * keys.shape[0] + 16  # S = 1 fits; more grows the outputs
    out_p = np.empty(size, dtype=np.int64)
    out_r = np.empty(size, dtype=np.int64)
    out_p, out_r, n = append_bisort(t, keys, vlo, vhi, lo, hi, min_ref, out_p, out_r, 0)
    return out_p[:n], out_r[:n]


#: Bytes of a wide item (float64 key + int64 ref; the buffer's, and a wide main array's), of
#: a compact one (:mod:`~streamjoin.indexes.blocks.key_codes`), and of a cache line.
_ITEM, _COMPACT_ITEM, _LINE = 16, 8, 64


def _run_bytes(m: int, probes: int, stride: int, compact: bool = False) -> int:
    """Bytes a probe batch of ``probes`` sorted keys moves through one sorted run of ``m``
    items, as :func:`probe_run` does it: a swept run is read whole (its keys) with a line of
    refs near each start; a searched one costs, per probe, the lines of the ``_GUESS_AHEAD``
    keys it reads at its interpolated position inside its partition of ``stride`` items (the
    index array stays in cache; a guess that misses reads more, not counted) and its refs
    line. A compact run's items hold their refs: no refs lines. Writes of the pairs are counted
    by the caller."""
    if m == 0:
        return 0
    if m <= _SWEEP_GAP * probes:
        return 8 * m + (0 if compact else min(8 * m, _LINE * probes))
    lines = -(-(8 * min(stride, _GUESS_AHEAD) + _LINE - 8) // _LINE)  # at any offset in a line
    return probes * _LINE * (lines + (0 if compact else 1))


def stream_bytes(
    subwindow_size: int,
    buffer_size: int,
    partitions: int,
    batch: int,
    window: int,
    layout: Layout = "wide",
) -> dict[str, float]:
    """Bytes read plus written per tuple when a window of ``window`` items in subwindows of
    ``subwindow_size`` streams batches of ``batch`` tuples that each probe the window (about
    one match per full subwindow) and are inserted: a model written from the kernels, for
    reporting throughput against this machine's copy bandwidth
    (:class:`streamjoin.roofline.Roofline`).

    Replays the insert policy of :func:`insert_bisort` over one subwindow's fill with counts
    only: a merge from the back (:func:`merge_back`) reads and writes every item it moves,
    16 bytes each way (for keys spread like the batch's, nearly every item moves); a merge into
    the main array resamples the index array; with the compact layout, the full subwindow is
    packed once (16 bytes read and 8 written per item). Probes follow :func:`_run_bytes` over
    the runs alive at each batch: with ``window = k · subwindow_size``, ``k`` full subwindows
    (compact items with the compact layout; the oldest is probed whole until it expires
    whole) plus the newest's main array and buffer (wide); each pair writes 16 bytes. The
    refinement of a compact probe's candidates is the join core's, not counted.
    Returns ``{"insert": .., "probe": .., "total": ..}``, per tuple, upper bounds where items
    move conditionally.
    """
    compact = item_layout("bisort", layout).packed
    c = subwindow_size
    full = -(-window // c)
    stride_full = max(1, -(-c // partitions))
    # packing the full subwindow: each item read (key and ref) and written as one word
    insert = (_ITEM + _COMPACT_ITEM) * c + partitions * _COMPACT_ITEM if compact else 0.0
    probe = 0.0
    for n, (m, buf), (m2, _) in fill_states(c, buffer_size, batch):
        stride = max(1, -(-m // partitions)) if m else 1
        probe += full * _run_bytes(c, n, stride_full, compact) + _run_bytes(m, n, stride)
        probe += _run_bytes(buf, n, _BUFFER_STRIDE) + 16 * n * full
        if m2 == m:  # into the buffer
            insert += 2 * _ITEM * (buf + n)
            continue
        run = 0 if buf == 0 else buf + (buf + n)  # the wide run of buffer and batch
        stride = max(1, -(-m2 // partitions))
        insert += 2 * _ITEM * run + 2 * _ITEM * (m + buf + n)
        insert += -(-m2 // stride) * (_LINE + 8)
    return {"insert": insert / c, "probe": probe / c, "total": (insert + probe) / c}


def fill_states(capacity: int, buffer_size: int, batch: int):
    """``(n, (main, buffered) before, (main, buffered) after)`` for each batch of ``n`` items
    that fills an empty subwindow, as :func:`insert_bisort` decides where they go."""
    m = buf = done = 0
    while done < capacity:
        n = min(batch, capacity - done)
        before = (m, buf)
        if to_buffer(m, buf, n, buffer_size, capacity):
            buf += n
        else:
            m, buf = m + buf + n, 0
        done += n
        yield n, before, (m, buf)


class BISort(SubwindowStore):
    """One BI-Sort subwindow (see the module docstring).

    Complexity: ``insert`` of n sorted items O(B + n) into the buffer, or O(M + B + n + P)
    when it merges, i.e. O(M / B + B / n) amortised per item; ``probe`` of m sorted keys
    O(m · log(1 + (M + B) / m) + candidates) -- a sweep of each run when it holds at most
    ``_SWEEP_GAP`` items per probe, a search per key otherwise; :meth:`ranges` the same
    without the buffer and the copy.
    Memory: 16 bytes per item of capacity plus ``16 B + 8 P`` while the subwindow fills; with
    ``layout="compact"`` a full subwindow then holds 8 bytes per item plus ``8 P``.

    With ``layout="compact"``, the insert that fills the subwindow packs its main array in
    place into 8-byte items (:mod:`~streamjoin.indexes.blocks.key_codes`), coded from the keys it
    holds (:func:`~streamjoin.indexes.blocks.key_codes.fit_final`): the keys are all known by then and
    never change, so the code follows keys that drift (timestamps) and leaves far outliers at
    the extreme codes instead of squeezing the rest together. Probes of a packed subwindow
    return every item whose code is in the probe's code range, a superset of the band's items
    that the join core refines (``exact = False``); a subwindow still filling is probed
    exactly.

    Parameters
    ----------
    capacity : int
        Items per subwindow (below 2**32 for the compact layout).
    partitions : int
        Size ``P`` of the index array, >= 1.
    buffer_size : int
        Size ``B`` of the insertion buffer, >= 0.
    layout : str
        ``"wide"`` (float64 key + int64 ref, exact probes; the default) or ``"compact"``
        (packed into 8-byte items once full).
    """

    kind = "bisort"

    def __init__(
        self, capacity: int, partitions: int = 512, buffer_size: int = 1024, layout: Layout = "wide"
    ) -> None:
        super().__init__(capacity)
        self.partitions = int_option(self.kind, "partitions", partitions, 1, MAX_PARTITIONS)
        self.buffer_size = int_option(self.kind, "buffer_size", buffer_size, 0, MAX_PARTITIONS)
        self._packs = item_layout(self.kind, layout).packed  # once full
        if self._packs and capacity >= REF_SPAN:
            raise ValueError(
                f"bisort subwindow_size must be below 2**32 for the compact layout, got {capacity}"
            )
        self.layout = layout
        self._t = BISortArrays(
            np.empty(capacity),
            np.empty(capacity, dtype=np.int64),
            np.empty(self.buffer_size),
            np.empty(self.buffer_size, dtype=np.int64),
            np.empty(self.partitions),
            np.zeros(5, dtype=np.int64),
            np.full(2, np.nan),
        )
        self._size = 0
        self.packed = False  #: the main array holds compact items (a full compact subwindow)

    def successor(self) -> BISort:
        return BISort(self.capacity, self.partitions, self.buffer_size, self.layout)

    def insert(self, keys, refs):
        n = len(keys)
        if n == 0:
            return
        t = self._t
        if self.packed:  # the inserts of a packed subwindow would write past its items
            raise ValueError("bisort: insert into a full subwindow (it is packed)")
        if self._packs:  # refs must fit 32-bit offsets: refused before any change
            t.meta[REF_BASE] = checked_ref_base(self.kind, refs, self._size == 0, t.meta[REF_BASE])
        insert_bisort(t, keys, refs)
        self._size += n
        if self._packs and self._size == self.capacity:
            self._pack()

    def _pack(self) -> None:
        """Pack the full main array (one run, buffer empty) into compact items in place: the
        float64 keys' memory becomes the items, the refs array and the buffer are freed."""
        t = self._t
        m = int(t.meta[MAIN])
        base, scale = fit_final(t.keys[:m])
        items = t.keys.view(np.uint64)
        pack_items_into(items[:m], t.keys[:m], t.refs[:m], base, scale, t.meta[REF_BASE])
        samples, stride = int(t.meta[SAMPLES]), int(t.meta[STRIDE])
        index = items[: (samples - 1) * stride + 1 : stride].copy()
        empty = np.empty(0)
        self._t = BISortArrays(
            items, items, empty, empty.astype(np.int64), index, t.meta, np.array([base, scale])
        )
        self.packed = True

    def probe(self, keys, vlo, vhi, lo, hi, min_ref):
        return probe_bisort(self._t, keys, vlo, vhi, lo, hi, min_ref)

    def ranges(self, vlo: np.ndarray, vhi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The result as ``<id_start, id_end>`` records of the main array (§III-D).

        ``vlo``/``vhi`` float64 (m,) as for :meth:`probe`. Returns ``starts, ends`` int64 (m,):
        ``[starts[i], ends[i])`` are the main-array items with keys in ``[vlo[i], vhi[i]]``
        (packed: with codes of keys in it), expired and rounding-margin items included;
        buffered items are not covered (see :func:`locate_bisort`).
        """
        return locate_bisort(self._t, vlo, vhi)

    def __len__(self) -> int:
        return self._size  # meta[MAIN] + meta[BUFFERED], without reading numpy scalars

    @property
    def nbytes(self) -> int:
        t = self._t
        arrays = [t.keys, t.buf_keys, t.buf_refs, t.index, t.meta, t.coder]
        return sum(a.nbytes for a in arrays) + (0 if self.packed else t.refs.nbytes)

    def main_refs(self) -> np.ndarray:
        """The refs of the main array, in its order (int64)."""
        t = self._t
        m = int(t.meta[MAIN])
        if not self.packed:
            return t.refs[:m]
        return item_refs(t.keys[:m], int(t.meta[REF_BASE]))

    def items(self):
        """``(keys, refs)``; a packed main array's keys are its codes (float64)."""
        t = self._t
        m, b = t.meta[MAIN], t.meta[BUFFERED]
        main = item_codes(t.keys[:m]).astype(np.float64) if self.packed else t.keys[:m]
        return np.concatenate([main, t.buf_keys[:b]]), np.concatenate(
            [self.main_refs(), t.buf_refs[:b]]
        )

    def check(self) -> None:
        t = self._t
        m, b, samples, stride, ref_base = (int(x) for x in t.meta)
        assert m >= 0 and m + b == len(self) <= self.capacity and 0 <= b <= self.buffer_size
        assert b == 0 or m + b < self.capacity, "a full subwindow is one run"
        main, refs = t.keys[:m], self.main_refs()
        if self.packed:
            assert m == self.capacity and b == 0, "only a full subwindow is packed"
            assert np.all(item_codes(main[1:]) >= item_codes(main[:-1])), "codes ascending"
            assert len(np.unique(refs)) == m, "refs unique"
            assert refs.min() >= ref_base and not np.isnan(t.coder).any()
        else:
            assert not self._packs or len(self) < self.capacity, "a full one is packed"
            assert np.array_equal(np.lexsort((refs, main)), np.arange(m)), "main sorted"
        buf_keys, buf_refs = t.buf_keys[:b], t.buf_refs[:b]
        assert np.array_equal(np.lexsort((buf_refs, buf_keys)), np.arange(b)), "buffer sorted"
        if m == 0:
            assert samples == 0
            return
        assert stride == max(1, -(-m // self.partitions)) and samples == -(-m // stride)
        assert samples <= self.partitions
        assert np.array_equal(t.index[:samples], main[::stride]), "index samples every stride"


@register
class BISortIndex(SubwindowIndex):
    """PanJoin's BI-Sort (§III-D) in a chain of subwindows (§III-A).

    Best for large probe batches and high selectivity: probes cost a search per key (a sweep of
    the subwindow for dense batches) and a copy per match; inserts merge the whole subwindow
    once per ``buffer_size`` items.

    Complexity: per subwindow as :class:`BISort`, over ``ceil(w / subwindow_size) + 1``
    subwindows for w live items; ``expire`` O(1) amortised.

    Parameters
    ----------
    n_keys : int
        Must be 1.
    subwindow_size : int
        Items per subwindow ``N_Sub``, >= 1. A join core over a count window of ``W`` tuples a
        stream, given neither this nor ``partitions``, uses ``W / 2`` (between 2^16 and 2^22)
        and partitions of 128 items (:meth:`window_options`).
    partitions : int
        Index array size ``P``, >= 1.
    buffer_size : int, optional
        Insertion buffer size ``B``, >= 0; by default ``max(1024, subwindow_size // 32)`` (the
        paper's default is 1K; see the module docstring for why ours is larger).
    threads : int
        Threads that probe a batch together (PanJoin §III-E's multi-threaded probing), >= 1.
        A sorted probe batch of at least :attr:`parallel_min_probes` keys is cut into
        ``threads`` contiguous slices, and each thread probes every subwindow with its slice
        (the kernels release the GIL); the default 1 probes in the calling thread. More than
        one pays only where the actor has cores to itself (see ``benchmarks/
        test_subwindow_indexes.py``).
    layout : str
        ``"compact"`` (default): each full subwindow is packed into 8-byte items, a 32-bit key
        code and a 32-bit relative ref (:mod:`~streamjoin.indexes.blocks.key_codes`), coded from its
        own keys; a probe of it returns a superset of the band's items, which the join core
        refines on the full keys (``exact`` is False). Half the memory of the full
        subwindows (see :class:`BISort`), at the speed of ``"wide"`` in a join (0.96–1.00×,
        one core, W = 2^18 and 2^20). ``"wide"``: a float64 key and an int64 ref per item,
        exact probes (PanJoin's items are 8 bytes; these are 16).
    """

    name = "bisort"
    store = BISort
    #: Smallest probe batch that is split among threads: below it, handing slices to the
    #: threads costs more than they save.
    parallel_min_probes = 4096

    def __init__(
        self,
        n_keys: int = 1,
        subwindow_size: int = 2**16,
        partitions: int = 512,
        buffer_size: int | None = None,
        threads: int = 1,
        layout: Layout = "compact",
    ) -> None:
        if buffer_size is None:
            size = int_option(self.name, "subwindow_size", subwindow_size, 1, MAX_SUBWINDOW)
            buffer_size = min(size, max(1024, size // 32))
        self.threads = int_option(self.name, "threads", threads, 1, MAX_THREADS)
        self._pool: ThreadPoolExecutor | None = None
        super().__init__(
            n_keys, subwindow_size, partitions=partitions, buffer_size=buffer_size, layout=layout
        )
        self.exact = item_layout(self.name, layout).exact

    @classmethod
    def window_options(cls, items: int) -> dict:
        """Subwindows of half the window (between 2^16, the default, and 2^22), partitions of
        128 items as the defaults have: a probe batch visits every subwindow, so many small
        ones cost it a search each, and larger ones cost the merges more (measured on the
        performance page: at W = 2^20 this halves a tuple's time)."""
        size = min(max(items // 2, 2**16), 2**22)
        return {"subwindow_size": size, "partitions": size // 128}

    def compile_ahead(self) -> str | None:
        """The probe of a packed subwindow (compact layout): reached only once one has
        filled, after the wide probe (:func:`packed_probe_jobs`)."""
        return None if self.exact else f"{__name__}:packed_probe_jobs"

    def probe_stores(self, keys, vlo, vhi, lo, hi):
        """Every subwindow appends to one pair of outputs (per thread): no per-store arrays to
        allocate, fault in and concatenate (about 5% of a probe batch at 32K, 8% at 1K)."""
        stores = tuple(s._t for s in self._subwindows if len(s))
        m = len(keys)
        if self.threads == 1 or m < max(self.parallel_min_probes, self.threads):
            return _probe_slice(stores, keys, vlo, vhi, lo, hi, self._before, 0, m)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="bisort-probe")
        cuts = np.linspace(0, m, self.threads + 1).astype(np.int64)
        slices = [
            self._pool.submit(_probe_slice, stores, keys, vlo, vhi, lo, hi, self._before, a, b)
            for a, b in zip(cuts[:-1], cuts[1:], strict=True)
        ]
        found = [f.result() for f in slices]
        return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])


def packed_probe_jobs() -> list:
    """:func:`append_bisort` over a packed subwindow's types (uint64 items), the kernel a
    first run with the compact layout compiles last (:mod:`streamjoin.compile_ahead`)."""
    items, refs, keys = (np.empty(0, dtype=d) for d in (np.uint64, np.int64, np.float64))
    meta, coder = np.zeros(5, dtype=np.int64), np.zeros(2)
    packed = BISortArrays(items, items, keys, refs, items, meta, coder)
    zero = np.int64(0)
    return [(append_bisort, (packed, keys, keys, keys, 0.0, 0.0, zero, refs, refs, zero))]


def _probe_slice(stores, keys, vlo, vhi, lo, hi, min_ref, a, b):
    """The pairs ``(i, ref)`` of probes ``a .. b`` of a sorted batch in every subwindow, ``i``
    indexing the whole batch: each subwindow appends to one pair of outputs."""
    keys, vlo, vhi = keys[a:b], vlo[a:b], vhi[a:b]
    # room for two candidates per probe and subwindow (S = 1 fits; more grows the outputs):
    # pages never written are never touched, so the room costs address space only
    size = 2 * len(keys) * len(stores) + 16
    out_p, out_r = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    n = 0
    for t in stores:
        out_p, out_r, n = append_bisort(t, keys, vlo, vhi, lo, hi, min_ref, out_p, out_r, n)
    pos = out_p[:n]
    if a:
        pos += a
    return pos, out_r[:n]
