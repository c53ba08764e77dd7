"""``bisort``: PanJoin's Buffered Indexed Sort (§III-D, §III-E) in a chain of subwindows.

A subwindow holds

- the *main array*, sorted by ``(key, ref)``;
- an unsorted *insertion buffer* of at most ``B`` items;
- the *index array*, which samples every ``stride = ceil(M / P)``-th key of the main array
  (``M`` items), so *partition* ``j`` is ``main[j · stride : (j + 1) · stride]``.

Inserts fill the buffer; a batch that does not fit is merged, together with the sorted buffer,
into the main array in one O(M + B) pass, and the index array is resampled (§III-D, §III-E).

A probe batch arrives sorted. The items a probe key can match form one range of the main
array, those in its widened key interval ``[vlo, vhi]``. BI-Sort finds where the range starts
-- a rebounding binary search on the index array from the previous probe's partition, then one
inside the partition from the previous probe's position (§III-E, Fig. 6) -- and walks to its
end, the ``<id_start, id_end>`` record of §III-D, which it then copies out (an exact test drops
the rounding-margin items at the ends). Starts and ends only move forward through the batch,
so a batch costs at most one merge-like pass over the main array plus O(log) per probe, and
equal probe keys find their range again in O(1) (§III-E). The buffer is sorted once per probe
batch and swept against it merge-like, each item's probes found from the previous item's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import in_band, register
from streamjoin.indexes.subwindows import (
    SubwindowIndex,
    SubwindowStore,
    int_option,
    match_item,
    rebound_search,
)

# slots of BISortArrays.meta
MAIN, BUFFERED, SAMPLES, STRIDE = range(4)


class BISortArrays(NamedTuple):
    """State of one BI-Sort subwindow; kernels mutate it in place."""

    #: float64 (capacity,): main array keys, ascending by (key, ref) in the first ``MAIN``
    keys: np.ndarray
    #: int64 (capacity,)
    refs: np.ndarray
    #: float64 (B,): insertion buffer keys, unsorted, the first ``BUFFERED`` in use
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

    The batch goes to the insertion buffer if it fits. Otherwise the buffer is sorted, merged
    with the batch, and the result merged into the main array; then the index array is
    resampled. ``keys`` float64 (n,) ascending (stable, so equal keys are in ref order), ``refs``
    int64 (n,). O(n) when buffered, else O(M + B log B + n + P).
    """
    m, b = t.meta[MAIN], t.meta[BUFFERED]
    n = keys.shape[0]
    if b + n <= t.buf_keys.shape[0]:
        t.buf_keys[b : b + n] = keys
        t.buf_refs[b : b + n] = refs
        t.meta[BUFFERED] = b + n
        return
    if b == 0:  # nothing buffered: the batch merges straight into the main array (§III-E)
        merge_back(t.keys, t.refs, m, keys, refs)
    else:
        order = np.argsort(t.buf_keys[:b], kind="mergesort")  # stable: the buffer is in ref order
        run_keys = np.empty(b + n)
        run_refs = np.empty(b + n, dtype=np.int64)
        run_keys[:b] = t.buf_keys[:b][order]
        run_refs[:b] = t.buf_refs[:b][order]
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


@njit(cache=True, nogil=True, inline="always")
def _seek(t, m, x, part, pos):
    """First main-array position with key ``>= x``, and its partition.

    §III-D: a search of the index array finds the partition, a search inside it the position;
    both rebound from the previous probe's answers ``part`` and ``pos`` (§III-E).
    """
    stride = t.meta[STRIDE]
    j = rebound_search(t.index, 0, t.meta[SAMPLES], part, x, False)
    # keys[(j-1)·stride] < x <= keys[j·stride]: the answer lies in between
    start = (j - 1) * stride + 1 if j > 0 else 0
    return rebound_search(t.keys, start, min(j * stride, m), pos, x, False), j


@njit(cache=True, nogil=True)
def locate_bisort(t, vlo, vhi):
    """Main-array ranges of a sorted probe batch: the ``<id_start, id_end>`` records of §III-D.

    ``[starts[i], ends[i])`` holds exactly the main-array items with ``vlo[i] <= key <=
    vhi[i]``: the matches of probe i plus rounding-margin items (and expired ones), which an
    exact test drops when pairs are needed. Each start is found by the index-array search
    (:func:`_seek`); each end by walking from the previous end. ``vlo``/``vhi`` float64 (m,)
    from :func:`~streamjoin.indexes.subwindows.band_bounds`. Returns ``starts, ends`` int64
    (m,). O(m · log(1 + M / m) + candidates): starts and ends only move forward.
    """
    m = t.meta[MAIN]
    n_probes = vlo.shape[0]
    starts = np.empty(n_probes, dtype=np.int64)
    ends = np.empty(n_probes, dtype=np.int64)
    part = start = end = 0
    for i in range(n_probes):
        start, part = _seek(t, m, vlo[i], part, start)
        # the range ends where keys pass vhi: walking there costs no more than copying it out
        end = max(end, start)
        while end < m and t.keys[end] <= vhi[i]:
            end += 1
        starts[i] = start
        ends[i] = end
    return starts, ends


@njit(cache=True, nogil=True)
def _match_buffer(t, order, keys, vlo, vhi, lo, hi, min_ref, out_p, out_r, n, write):
    """Pairs of the buffered items, visited in key order (``order``), with the sorted probes.

    An item's candidate probes start at the first ``vhi >= item``, which only moves forward
    from one item to the next: a rebounding search from the previous item's start (§III-E)
    instead of a search over the whole batch per item. Counts, and stores if ``write``, as
    :func:`~streamjoin.indexes.subwindows.match_item`.
    """
    n_probes = keys.shape[0]
    i0 = 0
    for j in order:
        r = t.buf_refs[j]
        if r >= min_ref:
            v = t.buf_keys[j]
            i0 = rebound_search(vhi, i0, n_probes, i0, v, False)
            n = match_item(v, r, keys, vlo, vhi, i0, n_probes, lo, hi, out_p, out_r, n, write)
    return n


@njit(cache=True, nogil=True)
def probe_bisort(t, keys, vlo, vhi, lo, hi, min_ref):
    """Items of a BI-Sort subwindow with ``lo <= item - keys[i] <= hi`` and ``ref >= min_ref``.

    ``keys`` float64 (m,) ascending; ``vlo``/``vhi`` from
    :func:`~streamjoin.indexes.subwindows.band_bounds`. Returns ``(i, refs)`` int64.
    O(m · log(1 + M / m) + candidates + B · log(B + m)), where candidates are the
    main-array items inside the widened intervals (:func:`locate_bisort`). The buffer is
    sorted once per probe batch and swept against the batch merge-like (§III-D, §III-E).
    """
    starts, ends = locate_bisort(t, vlo, vhi)
    total = (ends - starts).sum()
    b = t.meta[BUFFERED]
    order = np.argsort(t.buf_keys[:b])
    none = np.empty(0, dtype=np.int64)
    buffered = _match_buffer(t, order, keys, vlo, vhi, lo, hi, min_ref, none, none, 0, False)
    out_p = np.empty(total + buffered, dtype=np.int64)
    out_r = np.empty(total + buffered, dtype=np.int64)
    n = 0
    for i in range(keys.shape[0]):  # the ranges hold the matches plus rounding-margin items
        key = keys[i]
        for j in range(starts[i], ends[i]):
            r = t.refs[j]
            if r >= min_ref and in_band(t.keys[j], key, lo, hi):
                out_p[n] = i
                out_r[n] = r
                n += 1
    n = _match_buffer(t, order, keys, vlo, vhi, lo, hi, min_ref, out_p, out_r, n, True)
    return out_p[:n], out_r[:n]


class BISort(SubwindowStore):
    """One BI-Sort subwindow (see the module docstring).

    Complexity: ``insert`` of n items O(n) into the buffer, or O(M + B log B + n) when it
    merges, i.e. O(M / B + log B) amortised per item; ``probe`` of m sorted keys
    O(m · log(1 + M / m) + matches + B · log(B + m)); :meth:`ranges` the same without the
    buffer and the copy. Memory: 16 bytes per item of capacity plus
    ``16 B + 8 P``.

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

    def successor(self) -> BISort:
        return BISort(self.capacity, self.partitions, self.buffer_size)

    def insert(self, keys, refs):
        insert_bisort(self._t, keys, refs)

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
        return int(self._t.meta[MAIN] + self._t.meta[BUFFERED])

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
        assert m >= 0 and m + b <= self.capacity and 0 <= b <= self.buffer_size
        keys, refs = t.keys[:m], t.refs[:m]
        assert np.array_equal(np.lexsort((refs, keys)), np.arange(m)), "main sorted by (key, ref)"
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
    buffer_size : int
        Insertion buffer size ``B``, >= 0 (the paper's default is 1K).
    """

    name = "bisort"
    store = BISort

    def __init__(
        self,
        n_keys: int = 1,
        subwindow_size: int = 2**16,
        partitions: int = 512,
        buffer_size: int = 1024,
    ) -> None:
        super().__init__(n_keys, subwindow_size, partitions=partitions, buffer_size=buffer_size)
