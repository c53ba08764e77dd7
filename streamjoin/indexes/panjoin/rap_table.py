"""``rap_table``: PanJoin's Range Partition Table (§III-B) in a chain of subwindows.

A subwindow range-partitions its items into ``P`` partitions by a *partition table* of ``P``
splitters: partition ``p`` holds the keys in ``(high[p-1], high[p]]``, and ``high[P-1]`` is
``+inf`` so every key has a partition. Items are stored unsorted in an LLAT (§III-B2,
:mod:`~streamjoin.indexes.panjoin.llat`) of ``2P`` entries of ``ceil(N_Sub / P · σ)`` items: one normal
entry per partition plus ``P`` reserved ones for skewed partitions. Three histograms per
partition (item count, min and max key) feed the *adjustment algorithm* (§III-B1, Alg. 1),
which computes the partition table of the next subwindow.

The first subwindow has no predecessor and splits an assumed key ``domain`` evenly (§V-A1
starts from the range of a 32-bit integer, the default here). RaP-Table cannot follow keys
that keep increasing (§III-B3): they pile into the last partition, which the LLAT absorbs at
the price of longer scans -- ``wib_tree`` is the index for such keys.

Batch mode (§III-E): inserts and probes arrive sorted and find their partitions by rebounding
binary search from the previous key's partition; probes then sweep the partitions
(:func:`~streamjoin.indexes.panjoin.llat.scan_partitions`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.checks import number
from streamjoin.indexes.base import register
from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.blocks.key_codes import (
    bounds_for,
    encode,
    item_codes,
    item_refs,
)
from streamjoin.indexes.panjoin.llat import (
    PTR_G,
    Chains,
    LLATStore,
    SweptProbes,
    chain_entries,
    llat_append,
    new_llat,
    scan_partitions,
)
from streamjoin.indexes.panjoin.subwindows import (
    MAX_PARTITIONS,
    SubwindowIndex,
    int_option,
    rebound_search,
)
from streamjoin.modes import Layout

#: The largest LLAT entry size factor: a table of ``σ`` times a subwindow's items, 16 times
#: is far past §III-B2's 1.10-1.25 (and a huge ``σ`` would allocate petabytes).
MAX_SIGMA = 16.0


class RaPArrays(NamedTuple):
    """Partition table and histograms of one RaP-Table subwindow."""

    #: float64 (P,): splitters, non-decreasing; partition p holds keys in (high[p-1], high[p]]
    high: np.ndarray
    #: int64 (P,): items per partition
    count: np.ndarray  # type: ignore[assignment]  # shadows tuple.count: the kernels' name for it
    #: float64 (P,): smallest key per partition (meaningful where count > 0)
    kmin: np.ndarray
    #: float64 (P,): largest key per partition
    kmax: np.ndarray
    #: int64 (P,): last LLAT entry of each partition's chain
    tail: np.ndarray
    #: int64 (P,): ``p + 1``, -1 for the last partition (the sweep's successor links)
    part_next: np.ndarray
    #: int64 (P,): ``p``: partition p's chain starts at normal entry p (§III-B2)
    part_head: np.ndarray
    #: float64 (2,): the key code's ``(base, scale)`` of a packed LLAT (NaN while wide)
    coder: np.ndarray
    #: int64 (1,): the ref compact items count from
    ref_base: np.ndarray


@njit(cache=True, nogil=True)
def adjust_splitters(count, kmin, kmax, high):
    """The partition table for the next subwindow, from this one's histograms (§III-B1, Alg. 1).

    With ``N`` items, the ideal prefix count up to splitter ``j`` is ``bal_j = N/P · j``. Scanning
    the prefix sums ``sum_i`` of the counts, a ``bal_j`` in ``(sum_{i-1}, sum_i]`` places new
    splitter ``j`` inside partition ``i``, at ``min_i + (bal_j - sum_{i-1}) / count_i ·
    (max_i - min_i)``, assuming keys spread uniformly in the partition. (Alg. 1 l. 7 prints
    the formula without ``min_i +``, which would put splitters below their partition; in the
    worst case of §III-B1 ``min_i = 0`` and both agree.) An empty subwindow keeps ``high``.

    Parameters
    ----------
    count : int64 (P,)
    kmin, kmax : float64 (P,)
        Histograms; ``kmin[i] <= kmax[i]`` where ``count[i] > 0``.
    high : float64 (P,)
        This subwindow's splitters.

    Returns
    -------
    float64 (P,)
        New splitters, non-decreasing, the last one ``+inf``. O(P).
    """
    n_parts = count.shape[0]
    total = count.sum()
    if total == 0:
        return high.copy()
    new = np.empty(n_parts)
    new[n_parts - 1] = np.inf
    j = 1  # the next splitter to place, s_j (new[j - 1]); s_P is +inf
    prev = 0  # sum_{i-1}
    for i in range(n_parts):  # Alg. 1 l. 3-4
        cur = prev + count[i]
        bal = total * j / n_parts
        while j < n_parts and bal <= cur:  # l. 5-6; bal > prev here, so count[i] > 0
            frac = (bal - prev) / count[i]
            lo, hi = kmin[i], kmax[i]
            # (1 - f)·lo + f·hi cannot overflow where hi - lo can; clamping absorbs rounding
            # (and the NaN of -inf/+inf histograms)
            s = hi if frac >= 1.0 else (1.0 - frac) * lo + frac * hi
            new[j - 1] = min(max(s, lo), hi) if s == s else lo
            j += 1
            bal = total * j / n_parts
        prev = cur
    return new


@njit(cache=True, nogil=True)
def insert_rap_table(t, llat, keys, refs):
    """Add a sorted batch: rebounding binary search for each key's partition from the previous
    key's (§III-E), append to the partition's LLAT chain, update the histograms (§III-B1).

    ``keys`` float64 (n,) ascending, ``refs`` int64 (n,). The caller keeps the subwindow within
    its capacity, which bounds the LLAT to ``2P`` entries (§III-B2). O(n · log(2 + P / n)): each
    search gallops from the previous key's partition.
    """
    n_parts = t.high.shape[0]
    p = 0
    for i in range(keys.shape[0]):
        v = keys[i]
        p = rebound_search(t.high, 0, n_parts, p, v, False)
        llat_append(llat, t.tail, p, v, refs[i])
        if t.count[p] == 0:
            t.kmin[p] = v
            t.kmax[p] = v
        else:
            t.kmin[p] = min(t.kmin[p], v)
            t.kmax[p] = max(t.kmax[p], v)
        t.count[p] += 1


@njit(cache=True, nogil=True)
def probe_rap_table(t, llat, keys, vlo, vhi, lo, hi, min_ref):
    """Items of a RaP-Table subwindow with ``lo <= item - keys[i] <= hi`` and
    ``ref >= min_ref``.

    Each sorted probe's first partition, the one of ``vlo[i]``, by rebounding binary search
    (§III-E); then the partition sweep. ``keys``/``vlo``/``vhi`` float64 (m,). Returns
    ``(i, refs)`` int64. O(m · log(2 + P / m) + partitions visited + items scanned ·
    log(active probes) + matches).
    """
    n_parts = t.high.shape[0]
    start = np.empty(keys.shape[0], dtype=np.int64)
    p = 0
    for i in range(keys.shape[0]):
        p = rebound_search(t.high, 0, n_parts, p, vlo[i], False)
        start[i] = p
    ilo, ihi = bounds_for(llat.keys, vlo, vhi, t.coder)
    return scan_partitions(
        llat,
        Chains(t.high, t.part_next, t.part_head),
        SweptProbes(keys, vlo, vhi, ilo, ihi, start),
        t.ref_base[0],
        lo,
        hi,
        min_ref,
    )


class RaPTable(LLATStore):
    """One RaP-Table subwindow (see the module docstring).

    Complexity: ``insert`` of n sorted items O(n · log(2 + P / n)); ``probe`` of m sorted
    keys O(m · log(2 + P / m) + scanned partitions + their items · log(active probes) +
    matches), about ``N_Sub / P`` items per partition once the table is balanced;
    :meth:`successor` O(P).
    Memory: ``2P · ceil(N_Sub / P · σ)`` LLAT slots of 16 bytes (8 once packed), i.e. about
    ``2σ`` times the data (§III-B2), plus 56 bytes per partition.

    Parameters
    ----------
    capacity : int
        Items per subwindow ``N_Sub``.
    partitions : int
        Partition count ``P``, >= 1.
    sigma : float
        LLAT entry size factor ``σ``, above 1 and at most :data:`MAX_SIGMA` (§III-B2 suggests
        1.10-1.25).
    domain : (float, float)
        Key range the first subwindow's table splits evenly, finite, ``lo < hi``.
    high : float64 (P,), optional
        The partition table (from :meth:`successor`); overrides ``domain``.
    layout : str
        ``"wide"`` (default): a float64 key and an int64 ref per item, exact probes.
        ``"compact"``: the insert that fills the subwindow packs its LLAT in place into 8-byte
        items (a 32-bit key code and a 32-bit relative ref, :mod:`~streamjoin.indexes.
        key_codes`), coded from its own keys (:func:`~streamjoin.indexes.blocks.key_codes.
        fit_unsorted`: keys are all known by then, so the code follows drifting keys, and
        far outliers take the extreme codes); probes of a
        packed subwindow return a superset the caller refines. A subwindow still filling, or
        of ``capacity >= 2**32`` (refs would not fit), stays wide.
    """

    kind = "rap_table"
    _t: RaPArrays

    def __init__(
        self,
        capacity: int,
        partitions: int = 512,
        sigma: float = 1.25,
        domain: tuple[float, float] = (-(2.0**31), 2.0**31),
        high: np.ndarray | None = None,
        layout: Layout = "wide",
    ) -> None:
        super().__init__(capacity)
        self._set_layout(layout)
        p = self.partitions = int_option(self.kind, "partitions", partitions, 1, MAX_PARTITIONS)
        self.sigma = float(number("rap_table sigma", sigma, low=1, low_open=True, high=MAX_SIGMA))
        try:
            d_lo, d_hi = (float(x) for x in domain)
        except (TypeError, ValueError):
            raise ValueError(
                f"rap_table domain must be a pair of numbers, got {domain!r}"
            ) from None
        if not (math.isfinite(d_lo) and math.isfinite(d_hi) and d_lo < d_hi):
            raise ValueError(f"rap_table domain must be finite with lo < hi, got {domain!r}")
        self.domain = (d_lo, d_hi)
        if high is None:
            high = np.append(d_lo + (d_hi - d_lo) * np.arange(1, p) / p, np.inf)
        # σ > 1 makes P entries hold more than N_Sub items, so at most P - 1 partitions ever
        # need a reserved entry and 2P entries suffice (§III-B2); the max() keeps that true
        # for a σ so close to 1 that N_Sub · σ rounds to N_Sub
        width = max(math.ceil(capacity * self.sigma / p), capacity // p + 1)
        self._llat = new_llat(2 * p, width, p)
        self._size = 0
        arange = np.arange(p, dtype=np.int64)
        self._t = RaPArrays(
            high,
            np.zeros(p, dtype=np.int64),
            np.empty(p),
            np.empty(p),
            arange.copy(),
            np.append(arange[1:], -1),
            arange,
            np.full(2, np.nan),
            np.zeros(1, dtype=np.int64),
        )

    def successor(self) -> RaPTable:
        t = self._t
        high = adjust_splitters(t.count, t.kmin, t.kmax, t.high)
        return RaPTable(self.capacity, self.partitions, self.sigma, self.domain, high, self.layout)

    def insert(self, keys, refs):
        if len(refs) == 0:
            return
        t = self._t
        self._before_insert(refs, t.ref_base)
        insert_rap_table(t, self._llat, keys, refs)
        self._size += len(refs)
        self._after_insert(t.coder, t.ref_base)

    def probe(self, keys, vlo, vhi, lo, hi, min_ref):
        return probe_rap_table(self._t, self._llat, keys, vlo, vhi, lo, hi, min_ref)

    def partition_sizes(self) -> np.ndarray:
        """Items per partition, int64 (P,), in key order (a copy of the count histogram,
        §III-B1). How balanced the partition table is: ``N_Sub / P`` each when perfect. O(P)."""
        return self._t.count.copy()

    def items(self):
        """``(keys, refs)``; a compact subwindow's keys are its items' codes (float64)."""
        keys, refs = [], []
        for p in range(self.partitions):
            k, r = self._partition_items(p)
            keys.append(k)
            refs.append(r)
        return np.concatenate(keys), np.concatenate(refs)

    def _partition_items(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        llat = self._llat
        chain = chain_entries(llat, p)
        keys = np.concatenate([llat.keys[e, : llat.fill[e]] for e in chain])
        if not self.compact:
            return keys, np.concatenate([llat.refs[e, : llat.fill[e]] for e in chain])
        return item_codes(keys).astype(np.float64), item_refs(keys, int(self._t.ref_base[0]))

    def check(self) -> None:
        t, llat = self._t, self._llat
        p_count, width = self.partitions, llat.keys.shape[1]
        high = t.high
        assert high.shape == (p_count,) and high[-1] == np.inf
        assert np.all(high[:-1] <= high[1:]), "splitters non-decreasing"
        assert width * p_count > self.capacity, "P entries hold more than a subwindow (σ > 1)"
        ptr_g = int(llat.meta[PTR_G])
        assert p_count <= ptr_g <= 2 * p_count, "2P entries suffice (§III-B2)"
        seen = []
        for p in range(p_count):
            chain = chain_entries(llat, p)
            assert chain[-1] == t.tail[p], f"partition {p}: tail is the chain's last entry"
            assert all(llat.fill[e] == width for e in chain[:-1]), f"partition {p}: full links"
            assert all(e >= p_count for e in chain[1:]), "chains continue in reserved entries"
            seen += chain[1:]
            keys, _ = self._partition_items(p)
            assert len(keys) == t.count[p], f"partition {p}: count histogram"
            if len(keys) and self.compact:  # codes lie between those of the min and max keys
                c = [int(encode(k, t.coder[0], t.coder[1])) for k in (t.kmin[p], t.kmax[p])]
                assert keys.min() >= c[0] and keys.max() <= c[1], f"partition {p}: codes"
            elif len(keys):
                assert keys.min() == t.kmin[p] and keys.max() == t.kmax[p], (
                    f"partition {p}: min/max"
                )
                assert keys.max() <= high[p] and (p == 0 or keys.min() > high[p - 1]), (
                    f"partition {p}: keys within its splitters"
                )
        assert sorted(seen) == list(range(p_count, ptr_g)), "reserved entries used once each"
        assert t.count.sum() == self._size <= self.capacity
        assert len(np.unique(self.items()[1])) == self._size, "refs unique (decoded, if packed)"


@register
class RaPTableIndex(SubwindowIndex):
    """PanJoin's RaP-Table (§III-B) in a chain of subwindows (§III-A).

    Best for small batches and low selectivity on keys whose distribution drifts slowly;
    each subwindow re-balances its partition table from its predecessor's histograms.

    Complexity: per subwindow as :class:`RaPTable`, over ``ceil(w / subwindow_size) + 1``
    subwindows for w live items; ``expire`` O(1) amortised.

    Parameters
    ----------
    n_keys : int
        Must be 1.
    subwindow_size : int
        Items per subwindow ``N_Sub``, >= 1.
    partitions : int
        Partition count ``P``, >= 1.
    sigma : float
        LLAT entry size factor ``σ`` > 1.
    domain : (float, float)
        Key range the first subwindow splits evenly.
    layout : str
        ``"compact"`` (default): full subwindows are packed into 8-byte items, coded from
        their own keys, and probes of them return a superset of the band that the join core
        refines on the full keys (``exact`` is False; see :class:`RaPTable`): half the
        memory, 1.03–1.05× the speed of ``"wide"`` in a join (one core, W = 2^18).
        ``"wide"``: 16-byte items, exact probes.
    """

    name = "rap_table"
    store = RaPTable

    def __init__(
        self,
        n_keys: int = 1,
        subwindow_size: int = 2**16,
        partitions: int = 512,
        sigma: float = 1.25,
        domain: tuple[float, float] = (-(2.0**31), 2.0**31),
        layout: Layout = "compact",
    ) -> None:
        super().__init__(
            n_keys,
            subwindow_size,
            partitions=partitions,
            sigma=sigma,
            domain=domain,
            layout=layout,
        )
        self.exact = item_layout(self.name, layout).exact
