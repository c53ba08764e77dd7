"""PanJoin's subwindow architecture (§III-A, §III-G): a window as a chain of insert-only stores.

A stream's window is a chronological chain of *subwindows* of at most ``subwindow_size`` items
each. New items go into the newest subwindow; when it is full the next insert opens a new one;
the oldest subwindow is dropped whole once every ref in it is expired (§III-G1), so no store
ever deletes an item. The store inside a subwindow is pluggable: :class:`SubwindowStore` is the
protocol, and ``bisort``, ``rap_table`` and ``wib_tree`` implement it.

Batch mode (§III-A step 2, §III-E): the chain sorts every insert batch and every probe batch by
key once, and hands the stores sorted keys. For a probe batch it also computes, once for all
subwindows, the widened key interval ``[vlo[i], vhi[i]]`` of every probe key
(:func:`band_bounds`), made monotone in ``i`` so stores can search with hints from the previous
probe (the rebounding binary search of Fig. 6, :func:`rebound_search`) and sweep partitions
merge-like.

Expiry is coarse (whole subwindows), but probes are exact: like §III-G1's filtering operation
on the oldest subwindow, stores skip items with ``ref`` below the last ``expire`` bound.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import ClassVar

import numpy as np
from numba import njit

from streamjoin.checks import number
from streamjoin.indexes.base import WindowIndex, key_range
from streamjoin.indexes.blocks.key_codes import item_in_band
from streamjoin.indexes.blocks.key_order import stable_key_order

#: Ref below every real ref: "nothing expired yet", and the last ref of an empty subwindow.
NO_REF = np.iinfo(np.int64).min


# --------------------------------------------------------------------------------------------
# Kernels shared by the stores
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def left_of(v, x, upper):
    """Whether ``v`` lies before the answer of a search for ``x``: ``v <= x`` for the first key
    ``> x`` (``upper``), ``v < x`` for the first key ``>= x``."""
    return v <= x if upper else v < x


@njit(cache=True, nogil=True, inline="always")
def rebound_search(arr, start, stop, hint, x, upper):
    """First position ``p`` in ``[start, stop)`` with ``arr[p] > x`` (``upper``) or
    ``arr[p] >= x`` (not ``upper``); ``stop`` if there is none.

    The rebounding binary search of PanJoin §III-E, Fig. 6: a forward phase from ``hint`` with
    doubling steps until it passes the target, then a backward phase halving the step (a binary
    search). Consecutive keys of a sorted batch search from the previous answer, so a batch
    costs little more than a merge. It also searches leftwards when ``hint`` lies past the
    target, so any hint is correct.

    Parameters
    ----------
    arr : float64 (n,)
        Non-decreasing on ``[start, stop)``.
    start, stop, hint : int
        Search range and starting point (clamped into the range).
    x : float
    upper : bool

    Complexity O(log(1 + |answer - hint|)).
    """
    h = min(max(hint, start), stop)
    step = 1
    if h < stop and left_of(arr[h], x, upper):  # forward phase: the answer is after h
        while h + step < stop and left_of(arr[h + step], x, upper):
            h += step
            step *= 2
        lo, hi = h + 1, min(h + step, stop)
    else:  # the answer is at or before h: run the forward phase leftwards
        while h - step >= start and not left_of(arr[h - step], x, upper):
            h -= step
            step *= 2
        lo, hi = max(h - step + 1, start), h
    while lo < hi:  # backward phase; arr[hi] is not left of x (or hi == stop)
        mid = (lo + hi) >> 1
        if left_of(arr[mid], x, upper):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def band_bounds(keys, lo, hi):
    """Widened item-key intervals ``[vlo[i], vhi[i]]`` of sorted probe keys, monotone in ``i``.

    Each interval contains every item ``v`` with ``lo <= v - keys[i] <= hi``
    (:func:`~streamjoin.indexes.base.key_range`). ``inf - inf`` (an infinite key with an
    infinite bound) yields NaN; it becomes the unbounded ``-inf`` / ``+inf``. Rounding can make
    the intervals of consecutive keys step back by an ulp, so they are widened to a suffix
    minimum / prefix maximum: then the probes whose interval contains a value form one
    contiguous run of the batch, which the merge-like sweeps rely on.

    Parameters
    ----------
    keys : float64 (m,)
        Probe keys, ascending.
    lo, hi : float
        Band bounds (``lo <= hi``, may be infinite).

    Returns
    -------
    vlo, vhi : float64 (m,)
        Non-decreasing, ``vlo <= vhi``. O(m).
    """
    m = keys.shape[0]
    vlo = np.empty(m)
    vhi = np.empty(m)
    for i in range(m):
        a, b = key_range(keys[i], lo, hi)
        vlo[i] = -np.inf if a != a else a
        vhi[i] = np.inf if b != b else b
    # the passes carry a minimum / maximum from element to element, a chain of dependent
    # steps (2.8 of 4.3 us for 1,024 keys): run only where a step back is found, by a check
    # without that chain
    back = False
    for i in range(m - 1):
        back |= (vlo[i] > vlo[i + 1]) | (vhi[i] > vhi[i + 1])
    if back:
        for i in range(m - 2, -1, -1):
            vlo[i] = min(vlo[i], vlo[i + 1])
        for i in range(1, m):
            vhi[i] = max(vhi[i], vhi[i - 1])
    return vlo, vhi


@njit(cache=True, nogil=True)
def map_positions(pos, order):
    """``pos[k] = order[pos[k]]`` for every k, in place: positions in a sorted batch back to the
    caller's, without the new array (and its page faults) of ``order[pos]``. O(len(pos))."""
    for k in range(pos.shape[0]):
        pos[k] = order[pos[k]]


@njit(cache=True, nogil=True, inline="always")
def match_item(v, r, keys, vlo, vhi, a, b, lo, hi, out_p, out_r, n, write):
    """Count ``(i, r)`` for each probe ``i`` in ``[a, b)`` with ``lo <= v - keys[i] <= hi``,
    and store the pairs at ``out_p[n:]``/``out_r[n:]`` if ``write``; returns the new count.

    The candidate probes of item ``v`` are the contiguous run with ``vlo <= v <= vhi``
    (:func:`band_bounds`; for a compact item, the probes' item bounds), found by two searches
    over the sorted batch; each candidate is then tested exactly (a compact item is a
    candidate of each, refined by the caller: :func:`~streamjoin.indexes.blocks.key_codes.item_in_band`).
    Probes count their matches in a first pass and write them into arrays of
    exactly that size in a second: growing the outputs inside the scan loops would make numba
    adjust reference counts on every iteration. O(log(b - a) + candidates).
    """
    i0 = rebound_search(vhi, a, b, a, v, False)
    i1 = rebound_search(vlo, i0, b, i0, v, True)
    for i in range(i0, i1):
        if item_in_band(v, keys[i], lo, hi):
            if write:
                out_p[n] = i
                out_r[n] = r
            n += 1
    return n


# --------------------------------------------------------------------------------------------
# Option validation (at the boundary, with messages a user can act on)
# --------------------------------------------------------------------------------------------


#: The largest subwindow, in tuples: 2**32 - 1, what the compact layout's 32-bit refs can
#: number (and 64 GB of wide items, allocated when the subwindow starts).
MAX_SUBWINDOW = 2**32 - 1
#: The most partitions (BI-Sort's index array, RaP-Table's ranges) and the largest
#: insertion buffer: 2**24 float64 entries are 128 MB, against defaults of 512 and 1,024.
MAX_PARTITIONS = 2**24


def int_option(index: str, option: str, value, minimum: int, maximum: int) -> int:
    """``value`` as an int from ``minimum`` to ``maximum``, or a ValueError naming the index
    and the option (:func:`streamjoin.checks.number`)."""
    return int(number(f"{index} {option}", value, integer=True, low=minimum, high=maximum))


# --------------------------------------------------------------------------------------------
# Store protocol and the chain
# --------------------------------------------------------------------------------------------


class SubwindowStore(ABC):
    """One subwindow: an insert-only store of at most ``capacity`` items, expired whole.

    Parameters
    ----------
    capacity : int
        Items the subwindow will ever hold (``N_Sub``); stores may size their arrays by it.
    """

    #: Name used in error messages (the registry name of the chained index).
    kind: ClassVar[str]

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    @abstractmethod
    def successor(self) -> SubwindowStore:
        """An empty store with the same options for the next subwindow (the *create* command
        of §III-A). RaP-Table derives the new partition table from this one (§III-B1)."""

    @abstractmethod
    def insert(self, keys: np.ndarray, refs: np.ndarray) -> None:
        """Add items. ``keys`` float64 (n,) ascending, ``refs`` int64 (n,); at most
        ``capacity - len(self)`` of them."""

    @abstractmethod
    def probe(
        self,
        keys: np.ndarray,
        vlo: np.ndarray,
        vhi: np.ndarray,
        lo: float,
        hi: float,
        min_ref: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Items with ``lo <= item - keys[i] <= hi`` and ``ref >= min_ref``.

        ``keys`` float64 (m,) ascending; ``vlo``/``vhi`` from :func:`band_bounds`. Returns
        ``(i, refs)`` int64 in new arrays (the chain maps ``i`` back in place), ``i`` indexing
        ``keys``; each pair once.
        """

    @abstractmethod
    def __len__(self) -> int:
        """Items held."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of the arrays holding the store."""

    @abstractmethod
    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, refs)`` of every item held, in no particular order (for checks)."""

    @abstractmethod
    def check(self) -> None:
        """Assert every structural invariant (for tests)."""


class SubwindowIndex(WindowIndex):
    """A window index made of a chain of :attr:`store` subwindows (PanJoin §III-A, §III-G).

    Concrete indexes set ``name`` and ``store`` and pass the store's options through.

    Complexity, on top of the store's own: ``insert`` of n items O(n log n) (sorting the batch,
    §III-A step 2) plus O(1) per opened subwindow; ``probe`` of m keys O(m log m) (sorting the
    batch) plus one store probe per subwindow, ``ceil(w / subwindow_size) + 1`` subwindows for
    w live items; ``expire`` O(1) amortised (a dropped subwindow is released whole).

    Parameters
    ----------
    n_keys : int
        Must be 1.
    subwindow_size : int
        Items per subwindow, >= 1.
    **store_options
        Passed to the store constructor.
    """

    store: ClassVar[type[SubwindowStore]]
    takes_order = True
    # a warm run's batches (256 tuples a stream) fill two thirds of a subwindow each, so its
    # probes meet subwindows still filling (wide items) beside full ones (packed into 8-byte
    # items with layout="compact"), and subwindows roll over (the successor's set-up); with
    # 256 each batch filled one exactly, no probe met a filling subwindow, and a run compiled
    # that kernel in its first batches
    warm_options = {"subwindow_size": 384}

    def __init__(self, n_keys: int, subwindow_size: int, **store_options) -> None:
        super().__init__(n_keys)
        self.subwindow_size = int_option(
            self.name, "subwindow_size", subwindow_size, 1, MAX_SUBWINDOW
        )
        # oldest first; _last_refs[i] is the largest ref in _subwindows[i] (NO_REF if empty).
        # The chain is never empty, so the newest store can always hand on to a successor.
        self._subwindows: deque[SubwindowStore] = deque(
            [self.store(self.subwindow_size, **store_options)]
        )
        self._last_refs: deque[int] = deque([NO_REF])
        self._before = NO_REF

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        k = keys[0]
        done, n = 0, len(refs)
        while done < n:
            room = self.subwindow_size - len(self._subwindows[-1])
            if room == 0:  # the newest subwindow is full: create the next one (§III-A step 2)
                self._subwindows.append(self._subwindows[-1].successor())
                self._last_refs.append(NO_REF)
                continue
            part = slice(done, min(n, done + room))
            sub: np.ndarray | None
            # stable: equal keys stay in ref order, as BI-Sort's (key, ref) order needs
            if order is not None and (part.start, part.stop) == (0, n):
                sub = order
            elif order is not None:  # the whole batch's order, restricted to the part
                sub = order[(order >= part.start) & (order < part.stop)] - part.start
            else:
                sub = stable_key_order(k[part])
            if sub is None:
                self._subwindows[-1].insert(np.ascontiguousarray(k[part]), refs[part])
            else:
                self._subwindows[-1].insert(k[part][sub], refs[part][sub])
            self._last_refs[-1] = int(refs[part.stop - 1])
            done = part.stop

    def probe(self, keys, lo, hi):
        k = keys[0]
        if len(k) == 0 or len(self) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        # §III-A step 2: batch mode sorts the probes once for all stores (the join core probes
        # in key order already)
        order = stable_key_order(k)
        sorted_keys = np.ascontiguousarray(k) if order is None else k[order]
        lo0, hi0 = float(lo[0]), float(hi[0])
        vlo, vhi = band_bounds(sorted_keys, lo0, hi0)
        pos, refs = self.probe_stores(sorted_keys, vlo, vhi, lo0, hi0)
        if order is not None:
            map_positions(pos, order)
        return pos, refs

    def probe_stores(
        self, keys: np.ndarray, vlo: np.ndarray, vhi: np.ndarray, lo: float, hi: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The pairs ``(i, ref)`` of every subwindow for the sorted batch ``keys``, in new
        arrays; ``i`` indexes ``keys``. Arguments as for :meth:`SubwindowStore.probe`.

        Probes each store and concatenates; an index whose stores can append to one output
        overrides this to spare the copies.
        """
        found = [s.probe(keys, vlo, vhi, lo, hi, self._before) for s in self._subwindows if len(s)]
        if len(found) == 1:
            return found[0]
        return (np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]))

    def expire(self, before_ref: int) -> None:
        self._before = max(self._before, int(before_ref))
        # §III-G1: only whole subwindows expire; probes filter the rest of the oldest one
        while len(self._subwindows) > 1 and self._last_refs[0] < self._before:
            self._subwindows.popleft()
            self._last_refs.popleft()
        if len(self._subwindows[0]) and self._last_refs[0] < self._before:
            self._subwindows[0] = self._subwindows[0].successor()
            self._last_refs[0] = NO_REF

    def __len__(self) -> int:
        return sum(len(s) for s in self._subwindows)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self._subwindows)

    def check(self) -> None:
        subs, last = self._subwindows, self._last_refs
        assert len(subs) == len(last) >= 1
        prev = NO_REF
        for i, (s, last_ref) in enumerate(zip(subs, last, strict=True)):
            s.check()
            assert len(s) <= self.subwindow_size
            if i < len(subs) - 1:
                assert len(s) == self.subwindow_size, "only the newest subwindow has room"
            _, refs = s.items()
            assert len(refs) == len(s)
            if len(s) == 0:
                assert last_ref == NO_REF
                continue
            assert refs.min() > prev and refs.max() == last_ref, "subwindows are chronological"
            assert len(np.unique(refs)) == len(refs), "refs are unique"
            prev = last_ref
        assert len(subs[0]) == 0 or last[0] >= self._before, "a wholly expired subwindow is kept"
