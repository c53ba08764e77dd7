"""Compact index items: a 32-bit order-preserving key code and a 32-bit relative ref in one
uint64, for indexes that hold 8 bytes per item instead of a float64 key and an int64 ref.

An item is ``code << 32 | (ref - ref_base)``: items compare by code first, so a structure
that keeps them sorted by code can be searched with item bounds whatever order the refs of
one code are in.

The code of a key is

    code(k) = clamp(floor((k - base) · scale), 0, 2**32 - 1)

with ``scale`` a power of two (the product is exact). Every step is monotone (float
subtraction rounds monotonically, floor and clamp are monotone), so ``k1 <= k2`` implies
``code(k1) <= code(k2)``: the items with ``vlo <= key <= vhi`` all lie within the interval's
item bounds (:func:`item_bounds`), and a search over items returns a *superset* of the band's
items. Keys closer than ``1 / scale`` may share a code, and keys beyond the fitted range share
the extreme ones; the caller refines every candidate against the full key in the tuple store
(``WindowIndex.exact`` is False), as the join cores already read each candidate's stored row
to emit it. Integer keys whose fitted range spans fewer than 2**31 values (2**32 with no
headroom) get ``scale >= 1``: distinct integers then have distinct codes, and an integer band's
bounds are exact on codes, except for keys clamped to an extreme code.

``ref_base`` is the structure's first ref: a structure spans fewer than :data:`REF_SPAN` refs.

*When to fit.* A code fixed before its keys arrive cannot follow them: keys that drift beyond
it (increasing keys, timestamps) all take the top code, and a far outlier in the sample it was
fitted to squeezes the other keys into a few codes; probes then return thousands of
candidates (exact after refinement, thousands of times slower). So the indexes pack a
structure only once it is full and never changes again (a full BI-Sort or RaP-Table
subwindow), coded from the keys it holds (:func:`fit_final`, :func:`fit_unsorted`): the
codes span those keys with no headroom, and keys more than :data:`OUTLIER_REACH` widths of the
bulk beyond it are clamped to the extreme codes rather than widening the code: at most
``BULK_QUANTILE`` of the keys at each end (1,024 of a 2^20 subwindow), which only probes at the
very ends of the range meet. Degenerate fits are still monotone, only coarse: keys spanning most
of the float range leave the codes of the largest at the top, and subnormal keys, or a range
too narrow to halve, share a few codes or one.

This is PIM-Tree's and PanJoin's item (a 4-byte key and a 4-byte reference) with the exactness
our contract needs restored by refinement (docs/design.md §2). Code and ref share one
word rather than two arrays: a probe that found an item has its ref in the same cache line
(BI-Sort's probe batch of 32K over a 2^20 run: 31 ns a probe packed, 39 ns with the refs in
an array of their own, whose line each copy then misses; the sweep over 4-byte codes alone
saved only 1.5 ns of it).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import overload

from streamjoin.indexes.base import in_band

#: Largest code; also the mask of the ref half of an item.
CODE_MAX = 2**32 - 1
REF_MASK = np.uint64(CODE_MAX)
#: Most refs one structure may span from its ``ref_base``.
REF_SPAN = 2**32
_TOP = float(CODE_MAX)
_SHIFT = np.uint64(32)


def fit(keys: np.ndarray, headroom: float = 0.5) -> tuple[float, float]:
    """``(base, scale)`` for keys spread like ``keys``: their finite range widened by
    ``headroom`` of its width on each side, mapped onto the codes with the largest power-of-two
    ``scale`` that fits. Keys outside that range still code correctly (clamped: monotone, only
    coarser). With no finite key, or all keys equal, the codes are centred on the key.
    O(len(keys))."""
    finite = keys[np.isfinite(keys)] if len(keys) else keys
    if len(finite) == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    width = hi / 2 - lo / 2  # halves: hi - lo may overflow
    if width == 0.0:
        # one value: scale 1 keeps neighbouring integers apart, and the key sits mid-range
        return lo - 2.0**31, 1.0
    span = 2.0 * width * (1.0 + 2.0 * headroom)
    if not math.isfinite(hi - lo):  # a range wider than the largest float: no headroom
        base = lo
    else:
        base = lo - headroom * (hi - lo)
        if headroom > 0 and base >= lo:
            # the headroom rounded away (a range of a few units near 2**52): a step below the
            # lowest key, and room above the highest as wide
            base = math.nextafter(lo, -math.inf)
            span = max(span, (hi - base) * (1.0 + 2.0 * headroom))
    if not math.isfinite(span):  # (the loop below would not end)
        span = 2.0**1023
    # the largest power of two with span · scale <= 2**32 - 1 (span = f · 2**e, f in [0.5, 1)),
    # and a finite one (a subnormal span would ask for more than 2**1023)
    exp = min(32 - math.frexp(span)[1], 1023)
    while math.ldexp(span, exp) > _TOP:
        exp -= 1
    return base, math.ldexp(1.0, exp)


#: :func:`fit_final`: quantile (each end) whose keys bound the bulk of a run; :func:`fit_bulk`:
#: how far beyond the bulk, in bulk widths, keys are still coded apart rather than clamped.
BULK_QUANTILE = 1 / 1024
OUTLIER_REACH = 4.0


def fit_final(keys: np.ndarray) -> tuple[float, float]:
    """``(base, scale)`` for the sorted ``keys`` of a run that will not change (a full
    subwindow), by :func:`fit_bulk` over its finite keys, the bulk between the quantiles
    :data:`BULK_QUANTILE` and ``1 - BULK_QUANTILE``. O(log n)."""
    first = int(np.searchsorted(keys, -np.inf, side="right"))
    end = int(np.searchsorted(keys, np.inf, side="left"))
    n = end - first
    if n <= 0:
        return fit(keys[:0], 0.0)
    q = int(n * BULK_QUANTILE)
    return fit_bulk(keys[first], keys[end - 1], keys[first + q], keys[end - 1 - q])


def fit_unsorted(keys: np.ndarray) -> tuple[float, float]:
    """:func:`fit_final` of ``keys`` in any order (the quantiles by selection). O(n)."""
    finite = keys[np.isfinite(keys)]
    n = len(finite)
    if n == 0:
        return fit(finite, 0.0)
    q = int(n * BULK_QUANTILE)
    bulk_lo, bulk_hi = np.partition(finite, [q, n - 1 - q])[[q, n - 1 - q]]
    return fit_bulk(finite.min(), finite.max(), bulk_lo, bulk_hi)


def fit_bulk(lo: float, hi: float, bulk_lo: float, bulk_hi: float) -> tuple[float, float]:
    """``(base, scale)`` for the finite keys ``[lo, hi]`` of a structure that will not change
    (a full subwindow), most of which lie in ``[bulk_lo, bulk_hi]``: no headroom, since no key
    comes later. The codes span ``[lo, hi]`` unless a few keys lie far from the bulk: keys
    more than :data:`OUTLIER_REACH` bulk widths beyond it are clamped to the extreme codes
    (exact after refinement; only probes at the very ends of the range meet them) instead of
    squeezing the bulk into a few codes."""
    lo, hi, bulk_lo, bulk_hi = (float(x) for x in (lo, hi, bulk_lo, bulk_hi))
    reach = OUTLIER_REACH * (bulk_hi / 2 - bulk_lo / 2) * 2  # halves: the width may overflow
    if math.isfinite(reach):
        lo, hi = max(lo, bulk_lo - reach), min(hi, bulk_hi + reach)
    return fit(np.array([lo, hi]), 0.0)


@njit(cache=True, nogil=True, inline="always")
def encode(k, base, scale):
    """The code of float key ``k``, as a uint64 (NaN and ``+inf`` take the top code, ``-inf``
    code 0)."""
    v = np.floor((k - base) * scale)
    if v >= _TOP or v != v:
        return np.uint64(CODE_MAX)
    if v <= 0.0:
        return np.uint64(0)
    return np.uint64(v)


@njit(cache=True, nogil=True, inline="always")
def item_of(k, r, base, scale, ref_base):
    """The item (uint64) of key ``k`` with ref ``r``."""
    return (encode(k, base, scale) << _SHIFT) | np.uint64(r - ref_base)


@njit(cache=True, nogil=True)
def pack_items(keys, refs, base, scale, ref_base):
    """Items (uint64) of ``(keys, refs)``, in their order: for keys sorted, the items are
    sorted by code (codes are monotone), which is all a search over item bounds needs -- items
    of one code may keep any order of refs (merging code-sorted runs keeps them code-sorted).
    O(n)."""
    items = np.empty(keys.shape[0], dtype=np.uint64)
    pack_items_into(items, keys, refs, base, scale, ref_base)
    return items


@njit(cache=True, nogil=True)
def pack_items_into(out, keys, refs, base, scale, ref_base):
    """:func:`pack_items` written to ``out[:n]``, which may be the memory of ``keys`` itself
    seen as uint64 (``keys.view(np.uint64)``): item ``i`` depends on key ``i`` only, and is
    written after it is read. O(n)."""
    for i in range(keys.shape[0]):
        out[i] = item_of(keys[i], refs[i], base, scale, ref_base)


def checked_ref_base(kind: str, refs: np.ndarray, empty: bool, ref_base: int) -> int:
    """The ref base of a compact structure after taking ``refs`` (non-empty): their smallest
    if the structure is ``empty``, else ``ref_base``. A ``ValueError`` naming ``kind`` if a ref
    is below the base (refs must increase) or :data:`REF_SPAN` or more above it; the caller
    checks before it changes anything."""
    lo, hi = int(refs.min()), int(refs.max())
    base = lo if empty else int(ref_base)
    if lo < base:
        raise ValueError(f"{kind}: a ref is below the subwindow's first: refs must increase")
    if hi - base >= REF_SPAN:
        raise ValueError(f"{kind}: the refs of one compact subwindow span 2**32 or more")
    return base


@njit(cache=True, nogil=True)
def item_bounds(vlo, vhi, base, scale):
    """Item bounds (uint64) of widened key intervals ``[vlo[i], vhi[i]]``: every item whose
    key lies in the interval has ``lo[i] <= item <= hi[i]``; non-decreasing when the intervals
    are. O(m)."""
    m = vlo.shape[0]
    lo = np.empty(m, dtype=np.uint64)
    hi = np.empty(m, dtype=np.uint64)
    for i in range(m):
        lo[i] = encode(vlo[i], base, scale) << _SHIFT
        hi[i] = (encode(vhi[i], base, scale) << _SHIFT) | REF_MASK
    return lo, hi


def item_refs(items: np.ndarray, ref_base: int) -> np.ndarray:
    """The int64 refs of ``items``."""
    return (items & REF_MASK).astype(np.int64) + ref_base


def item_codes(items: np.ndarray) -> np.ndarray:
    """The key codes of ``items`` (uint64)."""
    return items >> _SHIFT


# --------------------------------------------------------------------------------------------
# Kernels generic over an index's item layout: wide (a float64 key beside an int64 ref) or
# compact (uint64 items). Each is a constant choice per numba specialisation (no branch).
# --------------------------------------------------------------------------------------------


def item_ref(v, r, ref_base):
    """(jitted) The ref of a held item ``v`` whose ref slot reads ``r``: ``r`` for a wide
    item, the ref packed in a compact one (counted from ``ref_base``)."""
    raise NotImplementedError


@overload(item_ref)
def _item_ref_ol(v, r, ref_base):
    if v == types.uint64:
        return lambda v, r, ref_base: ref_base + np.int64(v & REF_MASK)
    return lambda v, r, ref_base: r


def item_in_band(v, key, lo, hi):
    """(jitted) Whether held item ``v`` may match probe ``key``: the exact band test for a wide
    item; True for a compact one, already inside the probe's item bounds (the caller refines)."""
    raise NotImplementedError


@overload(item_in_band)
def _item_in_band_ol(v, key, lo, hi):
    if v == types.uint64:
        return lambda v, key, lo, hi: True
    return lambda v, key, lo, hi: in_band(v, key, lo, hi)


def bounds_for(a, vlo, vhi, coder):
    """(jitted) Widened key intervals as bounds on the items of array ``a``: ``(vlo, vhi)``
    for a wide array, :func:`item_bounds` for a compact one."""
    raise NotImplementedError


@overload(bounds_for)
def _bounds_for_ol(a, vlo, vhi, coder):
    if a.dtype == types.uint64:
        return lambda a, vlo, vhi, coder: item_bounds(vlo, vhi, coder[0], coder[1])
    return lambda a, vlo, vhi, coder: (vlo, vhi)
