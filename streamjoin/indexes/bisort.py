"""``bisort``: PanJoin's Buffered Indexed Sort (§III-D, §III-E) in a chain of subwindows.

A subwindow holds

- the *main array*, sorted by ``(key, ref)``;
- an *insertion buffer* of at most ``B`` items, also sorted by ``(key, ref)``;
- the *index array*, which samples every ``stride = ceil(M / P)``-th key of the main array
  (``M`` items), so *partition* ``j`` is ``main[j · stride : (j + 1) · stride]``.

Inserts merge each sorted batch into the buffer; a batch that does not fit is merged with
the buffer and the result merged into the main array in one O(M + B) pass, and the index
array is resampled (§III-D, §III-E). The paper's buffer is unsorted and sorted when it is
merged; keeping it sorted costs O(B) per batch in cache, and lets probes search the buffer
like the main array instead of sorting it for every probe batch. A larger ``B`` then costs
the probes little while every merge moves the whole main array, so the window index
defaults to ``B = N_Sub / 32`` (the paper's 1K would make each item of a 2^20 subwindow
move about 512 times).

A probe batch arrives sorted. The items a probe key can match form one range of the main
array, those in its widened key interval ``[vlo, vhi]``. BI-Sort finds where the range starts
-- a search of the index array for the partition, then one inside the partition -- and where
it ends, the ``<id_start, id_end>`` record of §III-D, which it then copies out (an exact test
drops the rounding-margin items at the ends). The searches run without branches for a group
of probes at a time with prefetches (:func:`locate_run`), and start where the previous group
ended (the rebounding search of §III-E), so a batch costs O(log) per probe and its cache
misses overlap; ends only move forward, and equal probe keys find their range again (§III-E).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import grow, in_band, register
from streamjoin.indexes.sorted_runs import prefetch
from streamjoin.indexes.subwindows import (
    SubwindowIndex,
    SubwindowStore,
    int_option,
    pick,
    rebound_search,
    upper_bound,
)

# slots of BISortArrays.meta
MAIN, BUFFERED, SAMPLES, STRIDE = range(4)


class BISortArrays(NamedTuple):
    """State of one BI-Sort subwindow; kernels mutate it in place."""

    #: float64 (capacity,): main array keys, ascending by (key, ref) in the first ``MAIN``
    keys: np.ndarray
    #: int64 (capacity,)
    refs: np.ndarray
    #: float64 (B,): insertion buffer keys, ascending by (key, ref) in the first ``BUFFERED``
    buf_keys: np.ndarray
    #: int64 (B,)
    buf_refs: np.ndarray
    #: float64 (P,): ``index[j] = keys[j · STRIDE]`` for ``j < SAMPLES``
    index: np.ndarray
    #: int64 (4,): items in the main array, items buffered, index samples, stride
    meta: np.ndarray


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

    The batch is merged into the sorted insertion buffer if it fits. Otherwise buffer and batch
    are merged, the result is merged into the main array, and the index array is resampled.
    ``keys`` float64 (n,) ascending (stable, so equal keys are in ref order), ``refs`` int64
    (n,). O(B + n) when buffered (in cache), else O(M + B + n + P).
    """
    m, b = t.meta[MAIN], t.meta[BUFFERED]
    n = keys.shape[0]
    if b + n <= t.buf_keys.shape[0]:
        merge_back(t.buf_keys, t.buf_refs, b, keys, refs)
        t.meta[BUFFERED] = b + n
        return
    if b == 0:  # nothing buffered: the batch merges straight into the main array (§III-E)
        merge_back(t.keys, t.refs, m, keys, refs)
    else:
        run_keys = np.empty(b + n)
        run_refs = np.empty(b + n, dtype=np.int64)
        run_keys[:b] = t.buf_keys[:b]
        run_refs[:b] = t.buf_refs[:b]
        merge_back(run_keys, run_refs, b, keys, refs)
        merge_back(t.keys, t.refs, m, run_keys, run_refs)
    m += b + n
    t.meta[MAIN] = m
    t.meta[BUFFERED] = 0
    stride = max(1, -(-m // t.index.shape[0]))  # every ceil(M/P)-th key: at most P samples
    samples = -(-m // stride)
    for j in range(samples):
        t.index[j] = t.keys[j * stride]
    t.meta[SAMPLES] = samples
    t.meta[STRIDE] = stride


#: Probes whose searches run interleaved, one binary-search level of all of them at a time.
_GROUP = 32
#: Items after the previous end in which a probe looks for its end first.
_END_AHEAD = 8
#: Items per sample of the index the probes build over the sorted buffer.
_BUFFER_STRIDE = 64


@njit(cache=True, nogil=True, inline="always")
def _group_starts(keys, m, index, samples, stride, x, low, base, count):
    """Set ``base[g]`` to the first position of ``keys[:m]`` with key ``>= x[g]``, for the
    ascending ``x`` (at most ``_GROUP``) whose partitions are ``>= low``; returns the last one's.

    §III-D's two searches -- the index array for the partition, then inside the partition --
    as binary searches without branches on the keys (:func:`~streamjoin.indexes.subwindows.pick`), run
    for the whole group one level after the other, each level prefetching the next level's
    keys: the group's cache misses overlap instead of forming one chain per probe (a sparse
    batch misses at almost every level of a partition). The index search covers only the
    partitions from ``low``, the previous group's last, to this group's last, found by a
    rebounding search (§III-E). ``count`` is scratch. O(size · (log(span) + log(stride))).
    """
    size = x.shape[0]
    high = rebound_search(index, low, samples, low, x[size - 1], False)
    base[:size] = low
    n = min(high + 1, samples) - low
    while n > 1:  # the partition: the first sample >= x, every probe the same levels
        half = n >> 1
        for g in range(size):
            b = base[g]
            base[g] = pick(index[np.uint64(b + half)] < x[g], b + half, b)
        n -= half
    widest = 1
    for g in range(size):
        j = base[g] + (index[np.uint64(base[g])] < x[g]) if n > 0 else low
        # keys[(j-1)·stride] < x <= keys[j·stride]: the start is in ((j-1)·stride, j·stride];
        # searching from (j-1)·stride keeps every range non-empty and in [0, m)
        b = max(j - 1, 0) * stride
        c = min(j * stride, m) - b if j > 0 else 1
        base[g] = b
        count[g] = c
        widest = max(widest, c)
        prefetch(keys, b + (c >> 1))
    while widest > 1:  # inside the partitions, level by level
        for g in range(size):
            b, c = base[g], count[g]
            half = c >> 1
            b = pick(keys[np.uint64(b + half)] < x[g], b + half, b)
            c -= half
            base[g] = b
            count[g] = c
            prefetch(keys, b + (c >> 1))
        widest -= widest >> 1
    for g in range(size):
        base[g] += keys[np.uint64(base[g])] < x[g]
    return high


@njit(cache=True, nogil=True, inline="always")
def _end(keys, m, end, start, x):
    """First position ``>= max(end, start)`` with key ``> x``: among the ``_END_AHEAD`` items
    there without branches, else by a rebounding search from there (ends move forward)."""
    end = max(end, start)
    stop = min(end + _END_AHEAD, m)
    end = upper_bound(keys, end, stop, x)
    if end == stop < m:
        end = rebound_search(keys, end, m, end, x, True)
    return end


@njit(cache=True, nogil=True)
def locate_run(keys, m, index, samples, stride, vlo, vhi, starts, ends):
    """``<id_start, id_end>`` records of a sorted probe batch in a sorted run (§III-D).

    Sets ``[starts[i], ends[i])`` to the items of ``keys[:m]`` with ``vlo[i] <= key <= vhi[i]``;
    ``index[:samples]`` samples the run every ``stride`` items. Starts by
    :func:`_group_starts`, ``_GROUP`` probes at a time; each end is walked to from the
    previous one (:func:`_end`). O(m · (log(1 + samples / m) + log(stride)) + candidates).
    """
    if m == 0:
        starts[:] = 0
        ends[:] = 0
        return
    base = np.empty(_GROUP, dtype=np.int64)
    count = np.empty(_GROUP, dtype=np.int64)
    end = low = 0
    for g0 in range(0, vlo.shape[0], _GROUP):
        x = vlo[g0 : g0 + _GROUP]
        low = _group_starts(keys, m, index, samples, stride, x, low, base, count)
        for g in range(x.shape[0]):
            end = _end(keys, m, end, base[g], vhi[g0 + g])
            starts[g0 + g] = base[g]
            ends[g0 + g] = end


@njit(cache=True, nogil=True)
def probe_run(keys, refs, m, index, samples, stride, probes, vlo, vhi, lo, hi, min_ref,
              out_p, out_r, n):  # fmt: skip
    """Append the pairs ``(i, ref)`` of a sorted run to ``out_p[:n]``/``out_r[:n]``.

    The items of ``keys[:m]``/``refs[:m]`` with ``lo <= key - probes[i] <= hi`` and ``ref >=
    min_ref``, as :func:`locate_run` finds them, copied out right after each group's search
    while its keys are in cache (their refs prefetched meanwhile); each candidate is stored and
    kept by advancing the count (no branch on the exact test). The outputs grow (doubling)
    when a group's candidates do not fit: at most a few times per batch. Returns ``(out_p,
    out_r, n)``. O(m · (log(1 + samples / m) + log(stride)) + candidates).
    """
    if m == 0:
        return out_p, out_r, n
    base = np.empty(_GROUP, dtype=np.int64)
    count = np.empty(_GROUP, dtype=np.int64)
    ends = np.empty(_GROUP, dtype=np.int64)
    end = low = 0
    for g0 in range(0, vlo.shape[0], _GROUP):
        x = vlo[g0 : g0 + _GROUP]
        low = _group_starts(keys, m, index, samples, stride, x, low, base, count)
        candidates = 0
        for g in range(x.shape[0]):
            prefetch(refs, base[g])
            end = _end(keys, m, end, base[g], vhi[g0 + g])
            ends[g] = end
            candidates += end - base[g]
        if n + candidates > out_p.shape[0]:
            out_p = grow(out_p[:n], n + candidates)
            out_r = grow(out_r[:n], n + candidates)
        for g in range(x.shape[0]):
            i = g0 + g
            key = probes[i]
            for j in range(base[g], ends[g]):
                r = refs[j]
                out_p[n] = i
                out_r[n] = r
                n += (r >= min_ref) & in_band(keys[j], key, lo, hi)
    return out_p, out_r, n


@njit(cache=True, nogil=True)
def locate_bisort(t, vlo, vhi):
    """Main-array ranges of a sorted probe batch: the ``<id_start, id_end>`` records of §III-D.

    ``[starts[i], ends[i])`` holds exactly the main-array items with ``vlo[i] <= key <=
    vhi[i]``: the matches of probe i plus rounding-margin items (and expired ones), which an
    exact test drops when pairs are needed (:func:`locate_run`). ``vlo``/``vhi`` float64 (m,)
    from :func:`~streamjoin.indexes.subwindows.band_bounds`. Returns ``starts, ends`` int64
    (m,).
    """
    starts = np.empty(vlo.shape[0], dtype=np.int64)
    ends = np.empty(vlo.shape[0], dtype=np.int64)
    locate_run(
        t.keys, t.meta[MAIN], t.index, t.meta[SAMPLES], t.meta[STRIDE], vlo, vhi, starts, ends
    )
    return starts, ends


@njit(cache=True, nogil=True)
def probe_bisort(t, keys, vlo, vhi, lo, hi, min_ref):
    """Items of a BI-Sort subwindow with ``lo <= item - keys[i] <= hi`` and ``ref >= min_ref``.

    ``keys`` float64 (m,) ascending; ``vlo``/``vhi`` from
    :func:`~streamjoin.indexes.subwindows.band_bounds`. Returns ``(i, refs)`` int64.
    The main array and the sorted buffer are probed alike (:func:`probe_run`; the buffer's
    index array is sampled on the fly). O(m · log(1 + (M + B) / m) + B / 64 + candidates),
    where candidates are the items inside the widened intervals.
    """
    size = 2 * keys.shape[0] + 16  # S = 1 per subwindow fits; more grows the outputs
    out_p, out_r, n = probe_run(
        t.keys, t.refs, t.meta[MAIN], t.index, t.meta[SAMPLES], t.meta[STRIDE], keys, vlo, vhi,
        lo, hi, min_ref, np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), 0,
    )  # fmt: skip
    b = t.meta[BUFFERED]
    if b > 0:
        index = np.ascontiguousarray(t.buf_keys[:b:_BUFFER_STRIDE])
        out_p, out_r, n = probe_run(
            t.buf_keys, t.buf_refs, b, index, index.shape[0], _BUFFER_STRIDE, keys, vlo, vhi,
            lo, hi, min_ref, out_p, out_r, n,
        )  # fmt: skip
    return out_p[:n], out_r[:n]


class BISort(SubwindowStore):
    """One BI-Sort subwindow (see the module docstring).

    Complexity: ``insert`` of n sorted items O(B + n) into the buffer, or O(M + B + n + P)
    when it merges, i.e. O(M / B + B / n) amortised per item; ``probe`` of m sorted keys
    O(m · log(M + B) + candidates); :meth:`ranges` the same without the buffer and the copy.
    Memory: 16 bytes per item of capacity plus ``16 B + 8 P``.

    Parameters
    ----------
    capacity : int
        Items per subwindow.
    partitions : int
        Size ``P`` of the index array, >= 1.
    buffer_size : int
        Size ``B`` of the insertion buffer, >= 0.
    """

    kind = "bisort"

    def __init__(self, capacity: int, partitions: int = 512, buffer_size: int = 1024) -> None:
        super().__init__(capacity)
        self.partitions = int_option(self.kind, "partitions", partitions, 1)
        self.buffer_size = int_option(self.kind, "buffer_size", buffer_size, 0)
        self._t = BISortArrays(
            np.empty(capacity), np.empty(capacity, dtype=np.int64),
            np.empty(self.buffer_size), np.empty(self.buffer_size, dtype=np.int64),
            np.empty(self.partitions), np.zeros(4, dtype=np.int64),
        )  # fmt: skip
        self._size = 0

    def successor(self) -> BISort:
        return BISort(self.capacity, self.partitions, self.buffer_size)

    def insert(self, keys, refs):
        insert_bisort(self._t, keys, refs)
        self._size += len(keys)

    def probe(self, keys, vlo, vhi, lo, hi, min_ref):
        return probe_bisort(self._t, keys, vlo, vhi, lo, hi, min_ref)

    def ranges(self, vlo: np.ndarray, vhi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The result as ``<id_start, id_end>`` records of the main array (§III-D).

        ``vlo``/``vhi`` float64 (m,) as for :meth:`probe`. Returns ``starts, ends`` int64 (m,):
        ``[starts[i], ends[i])`` are the main-array items with keys in ``[vlo[i], vhi[i]]``,
        expired and rounding-margin items included; buffered items are not covered (see
        :func:`locate_bisort`).
        """
        return locate_bisort(self._t, vlo, vhi)

    def __len__(self) -> int:
        return self._size  # meta[MAIN] + meta[BUFFERED], without reading numpy scalars

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._t)

    def items(self):
        t = self._t
        m, b = t.meta[MAIN], t.meta[BUFFERED]
        return (np.concatenate([t.keys[:m], t.buf_keys[:b]]),
                np.concatenate([t.refs[:m], t.buf_refs[:b]]))  # fmt: skip

    def check(self) -> None:
        t = self._t
        m, b, samples, stride = (int(x) for x in t.meta)
        assert m >= 0 and m + b == len(self) <= self.capacity and 0 <= b <= self.buffer_size
        keys, refs = t.keys[:m], t.refs[:m]
        assert np.array_equal(np.lexsort((refs, keys)), np.arange(m)), "main sorted by (key, ref)"
        buf_keys, buf_refs = t.buf_keys[:b], t.buf_refs[:b]
        assert np.array_equal(np.lexsort((buf_refs, buf_keys)), np.arange(b)), "buffer sorted"
        if m == 0:
            assert samples == 0
            return
        assert stride == max(1, -(-m // self.partitions)) and samples == -(-m // stride)
        assert samples <= self.partitions
        assert np.array_equal(t.index[:samples], keys[::stride]), "index samples every stride"


@register
class BISortIndex(SubwindowIndex):
    """PanJoin's BI-Sort (§III-D) in a chain of subwindows (§III-A).

    Best for large probe batches and high selectivity: probes cost a search per key and a copy
    per match; inserts merge the whole subwindow once per ``buffer_size`` items.

    Complexity: per subwindow as :class:`BISort`, over ``ceil(w / subwindow_size) + 1``
    subwindows for w live items; ``expire`` O(1) amortised.

    Parameters
    ----------
    n_keys : int
        Must be 1.
    subwindow_size : int
        Items per subwindow ``N_Sub``, >= 1.
    partitions : int
        Index array size ``P``, >= 1.
    buffer_size : int, optional
        Insertion buffer size ``B``, >= 0; by default ``max(1024, subwindow_size // 32)`` (the
        paper's default is 1K; see the module docstring for why ours is larger).
    """

    name = "bisort"
    store = BISort

    def __init__(
        self,
        n_keys: int = 1,
        subwindow_size: int = 2**16,
        partitions: int = 512,
        buffer_size: int | None = None,
    ) -> None:
        if buffer_size is None:
            size = int_option(self.name, "subwindow_size", subwindow_size, 1)
            buffer_size = min(size, max(1024, size // 32))
        super().__init__(n_keys, subwindow_size, partitions=partitions, buffer_size=buffer_size)
