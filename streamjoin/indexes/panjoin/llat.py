"""PanJoin's Linked List Adaptive Table (§III-B2) and the partition sweep of batch-mode probes.

An LLAT is a pool of fixed-width *entries*; a partition (a RaP-Table partition or a WiB+-Tree
leaf) stores its items unsorted in a chain of entries linked by ``next``. Items go to the last
entry of the chain; when it is full the chain takes the entry that the global pointer ``PtrG``
designates and ``PtrG`` advances. Entries are never freed: a subwindow is expired whole
(§III-G1), so neither the entries' ``Tail`` pointers nor a delete operation are kept.

RaP-Table starts with one *normal* entry per partition (entries ``0 .. P-1``, ``PtrG = P``);
WiB+-Tree starts with ``PtrG = 0`` and gives each leaf an entry when the leaf is created
(§III-C). :func:`scan_partitions` is the probe phase both share.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.blocks.key_codes import (
    REF_SPAN,
    checked_ref_base,
    fit_unsorted,
    item_ref,
    pack_items_into,
)
from streamjoin.indexes.panjoin.subwindows import SubwindowStore, match_item
from streamjoin.modes import Layout

# slot of LLAT.meta
PTR_G = 0


class LLAT(NamedTuple):
    """State of one LLAT; kernels mutate it in place (WiB+-Tree growth replaces the arrays)."""

    #: (entries, width): item keys, the first ``fill[e]`` of each entry in use: float64, or
    #: compact uint64 items (:mod:`~streamjoin.indexes.blocks.key_codes`, which carry their refs)
    keys: np.ndarray
    #: int64 (entries, width), or ``keys`` itself for compact items
    refs: np.ndarray
    #: int64 (entries,): items in each entry (the paper's ``Head``)
    fill: np.ndarray
    #: int64 (entries,): next entry of the chain, -1 at its end
    next: np.ndarray
    #: int64 (1,): ``PtrG``, the first entry never handed out
    meta: np.ndarray


def new_llat(entries: int, width: int, normal: int) -> LLAT:
    """An LLAT of ``entries`` entries of ``width`` items (a float64 key and an int64 ref;
    :func:`packed_llat` turns a full one into compact items); entries ``[0, normal)`` start as
    empty one-entry chains (the normal entries) and ``PtrG = normal``."""
    fill = np.zeros(entries, dtype=np.int64)
    nxt = np.full(entries, -1, dtype=np.int64)
    return LLAT(
        np.empty((entries, width)),
        np.empty((entries, width), dtype=np.int64),
        fill,
        nxt,
        np.array([normal], dtype=np.int64),
    )


def packed_llat(llat: LLAT, base: float, scale: float, ref_base: int) -> LLAT:
    """``llat``'s items packed in place into compact items coded by ``(base, scale)``, refs
    counted from ``ref_base`` (:mod:`~streamjoin.indexes.blocks.key_codes`): the float64 keys'
    memory becomes the items, the refs array is dropped. ``llat`` must be wide and is not
    used again."""
    items = llat.keys.view(np.uint64)
    _pack_entries(
        items, llat.keys, llat.refs, llat.fill, int(llat.meta[PTR_G]), base, scale, ref_base
    )
    return LLAT(items, items, llat.fill, llat.next, llat.meta)


@njit(cache=True, nogil=True)
def _pack_entries(items, keys, refs, fill, used, base, scale, ref_base):
    for e in range(used):
        f = fill[e]
        pack_items_into(items[e, :f], keys[e, :f], refs[e, :f], base, scale, ref_base)


def grown_llat(llat: LLAT, entries: int) -> LLAT:
    """A copy of the wide ``llat`` with room for ``entries`` entries (a packed LLAT belongs
    to a full subwindow, which never grows)."""
    used = int(llat.meta[PTR_G])
    out = new_llat(entries, llat.keys.shape[1], 0)
    for new, old in zip(out[:4], llat[:4], strict=True):
        new[:used] = old[:used]
    out.meta[PTR_G] = used
    return out


def chain_entries(llat: LLAT, head: int) -> list[int]:
    """Entries of the chain starting at ``head``, in order (for checks; stops on a cycle)."""
    chain: list[int] = []
    e = int(head)
    while e >= 0 and len(chain) <= len(llat.fill):
        chain.append(e)
        e = int(llat.next[e])
    return chain


@njit(cache=True, nogil=True, inline="always")
def take_entry(llat):
    """Hand out the entry at ``PtrG`` as an empty chain end. The caller ensures it exists."""
    g = llat.meta[PTR_G]
    llat.meta[PTR_G] = g + 1
    llat.fill[g] = 0
    llat.next[g] = -1
    return g


@njit(cache=True, nogil=True, inline="always")
def llat_append(llat, tail, part, v, r):
    """Add item ``(v, r)`` to partition ``part`` of a wide LLAT, whose chain ends at entry
    ``tail[part]``.

    §III-B2: a full last entry is linked to the entry at ``PtrG``. Keeping each chain's last
    entry in ``tail`` spares the walk down the list the paper describes. O(1).
    """
    e = tail[part]
    if llat.fill[e] == llat.keys.shape[1]:
        g = take_entry(llat)
        llat.next[e] = g
        tail[part] = g
        e = g
    f = llat.fill[e]
    llat.keys[e, f] = v
    llat.refs[e, f] = r
    llat.fill[e] = f + 1


class Chains(NamedTuple):
    """Partitions stored as LLAT chains, in key order (RaP-Table's ranges, WiB+-Tree's
    leaves), as :func:`scan_partitions` visits them."""

    #: float64 (P,): upper bound of each partition's keys (closed; ``+inf`` for the last);
    #: items of the partitions after ``p`` are ``>= high[p]``
    high: np.ndarray
    #: int64 (P,): the next partition in key order, -1 after the last
    next: np.ndarray
    #: int64 (P,): first entry of each partition's chain
    head: np.ndarray


class SweptProbes(NamedTuple):
    """A sorted probe batch as :func:`scan_partitions` sweeps it."""

    #: float64 (m,): the probe keys, ascending
    keys: np.ndarray
    #: float64 (m,): their intervals (:func:`~streamjoin.indexes.panjoin.subwindows.band_bounds`)
    vlo: np.ndarray
    vhi: np.ndarray
    #: (m,): the intervals as bounds on the held items: ``vlo``/``vhi`` for wide items, their
    #: :func:`~streamjoin.indexes.blocks.key_codes.item_bounds` for compact ones
    ilo: np.ndarray
    ihi: np.ndarray
    #: for each probe, the partition where keys ``>= vlo[i]`` can begin: every partition
    #: before it holds smaller keys only
    start: np.ndarray


@njit(cache=True, nogil=True)
def _sweep(llat, chains, probes, ref_base, lo, hi, min_ref, out_p, out_r, write):
    """One pass of :func:`scan_partitions`: count the matches, and store them if ``write``."""
    part_high, part_next, part_head = chains
    keys, vlo, vhi, ilo, ihi, start_part = probes
    m = keys.shape[0]
    n = 0
    a = b = 0  # active probes: [a, b)
    p = -1
    while a < m:
        if a == b:  # nothing active: jump to the next probe's start partition
            p = start_part[b]
            b += 1
        high = part_high[p]
        while b < m and vlo[b] <= high:
            b += 1
        first, last = ilo[a], ihi[b - 1]  # the active probes' hull: most items fall outside
        e = part_head[p]
        while e >= 0:
            for t in range(llat.fill[e]):
                v = llat.keys[e, t]
                if first <= v <= last:
                    r = item_ref(v, llat.refs[e, t], ref_base)
                    if r >= min_ref:
                        n = match_item(v, r, keys, ilo, ihi, a, b, lo, hi, out_p, out_r, n, write)
            e = llat.next[e]
        while a < b and vhi[a] < high:  # later partitions hold keys >= high only
            a += 1
        p = part_next[p]
        if p < 0:  # the last partition's high is +inf: every probe was active there
            break
    return n


@njit(cache=True, nogil=True)
def scan_partitions(llat, chains, probes, ref_base, lo, hi, min_ref):
    """Probe a sorted batch against partitions stored as LLAT chains (PanJoin §III-E).

    Partitions are visited once, in key order: a probe becomes *active* at its start partition
    (found beforehand, e.g. by rebounding binary search) and retires after the partition where
    its interval ends; while no probe is active the sweep jumps to the next probe's start
    partition. Each item of a visited partition is then matched against the active probes -- the
    paper's nested loop (outer: partition tuples, inner: related batch tuples), with the inner
    loop cut to the probes whose interval holds the item (:func:`match_item`). The sweep runs
    twice, counting and then storing the matches.

    Parameters
    ----------
    llat : LLAT
    chains : Chains
        The partitions.
    probes : SweptProbes
        The sorted probe batch; a compact item inside a probe's item bounds is returned (a
        superset the caller refines).
    ref_base : int
        The ref compact items count from.
    lo, hi : float
    min_ref : int
        Items with a smaller ref are skipped (expired).

    Returns
    -------
    probe_pos, refs : int64
        One entry per match. O(partitions visited + items scanned · log(active probes) +
        matches).
    """
    none = np.empty(0, dtype=np.int64)
    args = (llat, chains, probes, ref_base, lo, hi, min_ref)
    n = _sweep(*args, none, none, False)
    out_p = np.empty(n, dtype=np.int64)
    out_r = np.empty(n, dtype=np.int64)
    _sweep(*args, out_p, out_r, True)
    return out_p, out_r


class LLATStore(SubwindowStore):
    """A subwindow store whose items live in an LLAT (``self._llat``) under a structure of its
    own (``self._t``, a NamedTuple of arrays): RaP-Table and WiB+-Tree. Subclasses keep
    ``self._size`` up to date."""

    _size: int
    _packs: bool = False
    _llat: LLAT
    _t: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return self._size

    @property
    def compact(self) -> bool:
        """Whether this subwindow holds compact items (it is full and packed)."""
        return self._llat.keys.dtype == np.uint64

    def _set_layout(self, layout: Layout) -> None:
        """Take the ``layout`` option: ``"wide"``, or ``"compact"`` (a full subwindow is packed,
        if its refs fit 32-bit offsets: ``capacity < 2**32``); a ``ValueError`` otherwise."""
        packed = item_layout(self.kind, layout).packed
        self.layout = layout
        self._packs = packed and self.capacity < REF_SPAN  # once full

    def _before_insert(self, refs: np.ndarray, ref_base: np.ndarray) -> None:
        """Refuse an insert into a packed subwindow (it would write wide items into it), and
        one whose refs a compact subwindow cannot hold as 32-bit offsets from
        ``ref_base[0]``, which it sets from the first insert: before anything changes.
        :meth:`_set_layout` sets ``_packs``."""
        if self.compact:
            raise ValueError(f"{self.kind}: insert into a full subwindow (it is packed)")
        if self._packs:
            ref_base[0] = checked_ref_base(self.kind, refs, self._size == 0, ref_base[0])

    def _after_insert(self, coder: np.ndarray, ref_base: np.ndarray) -> None:
        """Pack the subwindow once the insert filled it (compact layout)."""
        if self._packs and self._size == self.capacity:
            self._pack(coder, int(ref_base[0]))

    def _pack(self, coder: np.ndarray, ref_base: int) -> None:
        """Pack the full subwindow's LLAT in place into 8-byte items, coded from its own keys
        (:func:`~streamjoin.indexes.blocks.key_codes.fit_unsorted`: one pass over them, so the code
        follows drifting keys and far outliers take the extreme codes); the code's
        ``(base, scale)`` go into ``coder``, refs count from ``ref_base``."""
        llat = self._llat
        used = int(llat.meta[PTR_G])
        filled = np.arange(llat.keys.shape[1]) < llat.fill[:used, None]
        coder[:] = fit_unsorted(llat.keys[:used][filled])
        self._llat = packed_llat(llat, coder[0], coder[1], ref_base)

    @property
    def nbytes(self) -> int:
        llat = self._llat
        arrays = [a for j, a in enumerate(llat) if not (j == 1 and a is llat.keys)]
        return sum(a.nbytes for a in self._t) + sum(a.nbytes for a in arrays)
