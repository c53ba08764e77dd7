"""Grid codes: 32-bit order-preserving key codes that a structure can re-fit without its keys.

:mod:`~streamjoin.indexes.blocks.key_codes` fits a code to the keys a structure holds, once, when it
stops changing (a full subwindow). PIM-Tree's T_S does not stop changing: every merge rebuilds
it from the old T_S's items and T_I's keys, and a compact T_S no longer holds the keys of its
old items. So its code must be one that a merge can widen or shift *exactly*, from the old codes
alone. A grid code is

    code(k) = clamp((image(k) - base) >> shift, 0, 2**32 - 1)

where ``image`` is the order-preserving uint64 image of a float64 (its bits, the sign bit
flipped for positive keys and all bits for negative ones; ``-0.0`` as ``+0.0``): integer and
monotone, ``+-inf`` included. ``base`` is a multiple of ``2**shift``. Every step is integer
arithmetic, so a re-fit to ``(base', shift')`` with ``shift' >= shift`` and ``base'`` a
multiple of ``2**shift'`` maps an old code ``c`` of a key within the old codes' range to

    code'(k) = (c + (base - base') / 2**shift) >> (shift' - shift)

exactly, the same value the key itself would code to (:func:`regrid`). A merge fits the new
grid to the old T_S's code range and T_I's keys (:func:`fit_grid`), so no item is ever
clamped; probe bounds may be, which keeps a superset.

The image is a float's bits, so the codes are finer near zero and coarser for large
magnitudes, relative to the key (a floating-point scale): keys in ``[0, 1e6]`` get codes
``2**-2`` wide near 1e6, keys in ``[-1e6, 1e6]`` ``2**-1``, and an outlier a billion times
larger of the same sign hardly widens the grid (its image is a few exponents away), unlike a
linear code. Integers of magnitude at least ``2**52`` whose range spans fewer than ``2**32``
values get exact codes. But keys of small spread at a large magnitude (epoch seconds) need a
fine grid that one key far away in the image (a 0.0, a key of the other sign) would coarsen
2**31-fold, and the shift of a structure that keeps old items never shrinks (a code cannot be
refined without its key; it is re-chosen once no old item survives). So a merge fits the grid
to the bulk of its new keys (:func:`bulk_window`) and, while old items survive, keeps their
grid only if it is at most :data:`COARSER_BY` bits coarser than the new keys' own
(:func:`choose_grid`); keys the grid does not cover wait, with full keys, in a side run of the
structure's own (PIM-Tree's).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from streamjoin.indexes.blocks.key_codes import CODE_MAX, REF_MASK
from streamjoin.indexes.blocks.no_refcount import NO_REFCOUNT
from streamjoin.indexes.blocks.sorted_runs import scan_run

# items as in ``key_codes``: the code above the ref's offset, one uint64
_SIGN = np.uint64(2**63)
_TOP = np.uint64(CODE_MAX)
_MASK = REF_MASK
_32 = np.uint64(32)


@intrinsic
def _bits(typingctx, x):
    """The bits of float64 ``x`` as a uint64."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.uint64(types.float64), codegen


@njit(cache=True, nogil=True, inline="always")
def image(k):
    """The order-preserving uint64 image of float64 ``k`` (``-0.0`` as ``+0.0``; a NaN above
    ``+inf``, or below ``-inf`` if its sign bit is set, as x86's default NaN's is)."""
    u = _bits(k + 0.0)
    if u >= _SIGN:
        return ~u
    return u | _SIGN


@njit(cache=True, nogil=True, inline="always")
def grid_code(k, base, shift):
    """The code (uint64) of key ``k`` on the grid ``(base, shift)``, clamped."""
    u = image(k)
    if u < base:
        return np.uint64(0)
    return min((u - base) >> shift, _TOP)


@njit(cache=True, nogil=True, inline="always")
def grid_bounds(vlo, vhi, base, shift):
    """Item bounds (uint64) of the widened key interval ``[vlo, vhi]``: every item whose key
    lies in it has ``lo <= item <= hi`` (a NaN bound, from an infinite key and bound, widens to
    its end: ``-inf + inf`` is a NaN whose image may lie at either end)."""
    lo = np.uint64(0) if vlo != vlo else grid_code(vlo, base, shift) << _32
    hi = _TOP if vhi != vhi else grid_code(vhi, base, shift)
    return lo, (hi << _32) | _MASK


@njit(cache=True, nogil=True, inline="always")
def item_ref(item, ref_base):
    """The int64 ref of ``item`` in a structure whose refs count from ``ref_base``."""
    return ref_base + np.int64(item & _MASK)


@njit(cache=True, nogil=True, inline="always")
def grid_item(k, r, base, shift, ref_base):
    """The item of key ``k`` with ref ``r``: its code above its ref's offset from
    ``ref_base``."""
    return (grid_code(k, base, shift) << _32) | np.uint64(r - ref_base)


def fit_grid(lo: int, hi: int, shift: int = 0) -> tuple[int, int]:
    """``(base, shift')``: the finest grid with ``shift' >= shift`` whose codes cover the
    images ``[lo, hi]`` (Python ints, ``0 <= lo <= hi < 2**64``), ``base`` a multiple of
    ``2**shift'``. O(1)."""
    shift = max(shift, (hi - lo).bit_length() - 32)  # at most one step short of the answer
    while True:
        base = lo >> shift << shift
        if (hi - base) >> shift <= CODE_MAX:
            return base, shift
        shift += 1


def image_range(base: int, shift: int, first_code: int, last_code: int) -> tuple[int, int]:
    """The images of keys with codes ``first_code … last_code`` on grid ``(base, shift)``."""
    return base + (first_code << shift), min(base + ((last_code + 1) << shift) - 1, 2**64 - 1)


#: :func:`bulk_window`: quantile (each end) whose keys bound the bulk of a merge's new keys, and
#: how far beyond the bulk, in bulk widths (at least 2**32 images), keys still join the grid.
#: A merge's new keys are few (m · w), so the quantile is coarse: a key in 64 may be an outlier
#: (a 0.0 among epoch seconds) without widening the grid; the bulk of uniform or normal keys
#: reaches every key of theirs.
BULK_QUANTILE = 1 / 64
OUTLIER_REACH = 4
#: :func:`choose_grid`: how many bits coarser than the new keys' own grid the grid that old
#: items keep may be before the new keys wait in the side run instead.
COARSER_BY = 2


def bulk_window(keys: np.ndarray) -> tuple[int, int]:
    """The images a grid for the sorted float64 ``keys`` (non-empty) should cover: their
    range, cut to :data:`OUTLIER_REACH` bulk widths beyond the bulk (the keys between the
    quantiles :data:`BULK_QUANTILE` and ``1 - BULK_QUANTILE``), so that a few far keys do not
    coarsen the codes of the rest. O(1)."""
    n = len(keys)
    first, lo, hi, last = (int(x) for x in _quantile_images(keys, int(n * BULK_QUANTILE)))
    reach = max(OUTLIER_REACH * (hi - lo), 2**32)
    return max(first, lo - reach), min(last, hi + reach)


def choose_grid(
    lo: int, hi: int, old: tuple[int, int] | None, old_range: tuple[int, int] | None
) -> tuple[tuple[int, int], bool]:
    """``(grid, takes_new)`` for a merge whose new keys' bulk window is the images ``[lo,
    hi]`` (:func:`bulk_window`), when items coded on grid ``old`` with images in
    ``old_range`` survive (else both None).

    With no old item, the finest grid over the window. Otherwise the finest grid that covers
    both without refining ``old`` (shift never below old's); but if that grid is more than
    :data:`COARSER_BY` bits coarser than the new keys' own, the new keys would lose their
    resolution to items that are expiring (the keys moved to another range): then ``old`` is
    kept and ``takes_new`` is False, and the new keys wait, with full keys, until no old item
    survives. O(1)."""
    own = fit_grid(lo, hi)
    if old is None:
        return own, True
    assert old_range is not None  # (given with old)
    both = fit_grid(min(lo, old_range[0]), max(hi, old_range[1]), old[1])
    if both[1] > own[1] + COARSER_BY:
        return old, False
    return both, True


def grid_span(grid: tuple[int, int]) -> tuple[int, int]:
    """The images that ``grid`` codes without clamping."""
    base, shift = grid
    return base, min(base + ((CODE_MAX + 1) << shift) - 1, 2**64 - 1)


def regrid(old: tuple[int, int], new: tuple[int, int]) -> tuple[np.uint64, np.uint64]:
    """``(add, shift)`` that take a code on grid ``old`` to grid ``new`` (``(base, shift)``
    pairs, ``new`` fitted over ``old``'s codes by :func:`fit_grid`): ``(code + add) >> shift``
    in uint64 arithmetic, exact for every code of a key in ``new``'s range (the sum may wrap:
    its true value lies in ``[0, 2**64)``)."""
    (base, shift), (new_base, new_shift) = old, new
    if new_shift < shift or (base - new_base) % (1 << shift):
        raise ValueError(f"grid {new} is not coarser than {old} on its grid")
    add = ((base - new_base) >> shift) % 2**64
    return np.uint64(add), np.uint64(new_shift - shift)


@njit(cache=True, nogil=True)
def span_slice(keys, lo, hi):
    """``(i0, i1)``: the sorted float64 ``keys[i0:i1]`` are those whose images lie in
    ``[lo, hi]`` (uint64), by binary search. O(log n)."""
    n = keys.shape[0]
    a, b = 0, n
    while a < b:  # first image >= lo
        mid = (a + b) >> 1
        if image(keys[mid]) < lo:
            a = mid + 1
        else:
            b = mid
    i0, b = a, n
    while a < b:  # first image > hi
        mid = (a + b) >> 1
        if image(keys[mid]) <= hi:
            a = mid + 1
        else:
            b = mid
    return i0, a


@njit(cache=True, nogil=True)
def _quantile_images(keys, q):
    """The images of sorted ``keys``' first, ``q``-th, ``q``-th last and last."""
    n = keys.shape[0]
    return image(keys[0]), image(keys[q]), image(keys[n - 1 - q]), image(keys[n - 1])


@njit(cache=True, nogil=True)
def merge_grid_items_into(
    old, add, shift, ref_add, old_ref_base, ti_keys, ti_refs, base, new_shift, ref_base, before, out
):
    """Merge ``old`` code-sorted items (re-gridded: ``(code + add) >> shift``, refs moved by
    ``ref_add``) with ``(ti_keys, ti_refs)`` (sorted by key, every ref above ``old``'s, coded
    on ``(base, new_shift)`` from ``ref_base``) into ``out``, dropping items with ref below
    ``before``. The result is sorted by code (equal codes: old items first). Written before the
    test that keeps it, as :func:`~streamjoin.indexes.blocks.sorted_runs.merge_runs_into`. Returns
    how many were kept. O(len(old) + len(ti_keys))."""
    na, nb = old.shape[0], ti_keys.shape[0]
    i = k = 0
    for j in range(nb):
        b = grid_item(ti_keys[j], ti_refs[j], base, new_shift, ref_base)
        bc = b >> _32
        while i < na:
            a = old[i]
            code = ((a >> _32) + add) >> shift
            if code > bc:
                break
            out[k] = (code << _32) | ((a + ref_add) & _MASK)
            k += item_ref(a, old_ref_base) >= before
            i += 1
        out[k] = b
        k += ti_refs[j] >= before
    for q in range(i, na):
        a = old[q]
        out[k] = ((((a >> _32) + add) >> shift) << _32) | ((a + ref_add) & _MASK)
        k += item_ref(a, old_ref_base) >= before
    return k


# --------------------------------------------------------------------------------------------
# Kernels generic over a sorted leaf level's layout: float64 keys beside int64 refs (wide) or
# grid-coded uint64 items (compact). Each is a constant choice per numba specialisation.
# --------------------------------------------------------------------------------------------


def bounds_on(top, vlo, vhi, base, shift):
    """(jitted) The widened key interval ``[vlo, vhi]`` as bounds on a sorted level whose
    dtype's largest value is ``top`` (:func:`~streamjoin.indexes.blocks.sorted_runs.largest`, a
    scalar, so that the call passes no array): ``(vlo, vhi)`` for float64 keys,
    :func:`grid_bounds` on the grid ``(base, shift)`` for compact items."""
    raise NotImplementedError


@overload(bounds_on)
def _bounds_on_ol(top, vlo, vhi, base, shift):
    if top == types.uint64:
        return lambda top, vlo, vhi, base, shift: grid_bounds(vlo, vhi, base, shift)
    return lambda top, vlo, vhi, base, shift: (vlo, vhi)


def scan_on(keys, refs, start, stop, key, lo, hi, bhi, min_ref, ref_base, probe, out_p, out_r, n):
    """(jitted) Append ``(probe, ref)`` for each item of the sorted level ``keys[start:stop]``
    up to the bound ``bhi`` whose ref is at least ``min_ref``, returning the new count: float64
    keys (``refs`` beside them) are tested exactly
    (:func:`~streamjoin.indexes.blocks.sorted_runs.scan_run`); compact items (refs from ``ref_base``)
    are all candidates, which the caller refines. As ``scan_run``, matches beyond the outputs'
    room are counted, not written (the caller grows them and scans again)."""
    raise NotImplementedError


@overload(scan_on, jit_options=NO_REFCOUNT)
def _scan_on_ol(
    keys, refs, start, stop, key, lo, hi, bhi, min_ref, ref_base, probe, out_p, out_r, n
):
    if keys.dtype == types.uint64:

        def scan_items(
            keys, refs, start, stop, key, lo, hi, bhi, min_ref, ref_base, probe, out_p, out_r, n
        ):
            room = out_p.shape[0]
            for j in range(start, stop):
                v = keys[j]
                if v > bhi:
                    break
                r = item_ref(v, ref_base)
                if r >= min_ref:
                    if n < room:
                        out_p[n] = probe
                        out_r[n] = r
                    n += 1
            return n

        return scan_items

    def scan_keys(
        keys, refs, start, stop, key, lo, hi, bhi, min_ref, ref_base, probe, out_p, out_r, n
    ):
        n, _ = scan_run(keys, refs, start, stop, key, lo, hi, bhi, min_ref, probe, out_p, out_r, n)
        return n

    return scan_keys


@njit(cache=True, nogil=True, inline="always")
def route_of(k, base, shift):
    """The lowest item bound of key ``k`` on the grid ``(base, shift)``: how an insert routes
    it through a compact T_S's inner nodes (by its code)."""
    return grid_code(k, base, shift) << _32


@njit(cache=True, nogil=True)
def route_items(keys, grid):
    """:func:`route_of` each key on ``grid``. O(n)."""
    out = np.empty(keys.shape[0], dtype=np.uint64)
    for i in range(keys.shape[0]):
        out[i] = route_of(keys[i], grid[0], grid[1])
    return out
