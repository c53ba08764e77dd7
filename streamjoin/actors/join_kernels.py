"""numba kernels of the join core: exact pairs from index candidates, and the batch's
self-join.

Orientation codes: ``R_PROBES`` (the probing tuple is r, the candidate s), ``S_PROBES`` (the
probing tuple is s), ``EITHER`` (self-join: θ(cand, probe) or θ(probe, cand)).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.extending import overload

from streamjoin.actors.store import IDX, INGEST_NS, LO_IDX, SEQ
from streamjoin.indexes.base import key_range
from streamjoin.indexes.blocks.sorted_runs import prefetch
from streamjoin.query import AND_ALL, ENDS_TERM

R_PROBES = 0
S_PROBES = 1
EITHER = 2

#: How many candidates ahead :func:`probe_pairs` prefetches the stored tuple's row.
_AHEAD = 8


class ImageConditions(NamedTuple):
    """θ in the form kernels evaluate (docs/design.md §1) while no integer beyond ``2**52`` has been
    seen: condition ``c`` holds iff ``lo[c] <= s_attrs[s_row[c]] - r_attrs[r_row[c]] <=
    hi[c]`` is not ``neg[c]``, on the float64 images (exact then); θ is the AND of the
    ``AND_ALL`` conditions and, when there are terms (``link``), the OR of the terms, each the
    AND of its conditions (docs/design.md §1's disjunction). Its own type, so that the
    kernels compiled for it hold none of :class:`Conditions`' integer code: inlined into a
    loop over candidates, that code kept numba from pruning the loop's reference counting,
    and every candidate θ tested cost ~115 ns more (incref/decref atomics; 120 against 5 ns
    a candidate in ``probe_pairs``, measured)."""

    #: int64 (C,): row of r's attribute in an ``attrs`` matrix
    r_row: np.ndarray
    #: int64 (C,): row of s's attribute
    s_row: np.ndarray
    #: float64 (C,): closed bounds on the difference ``s - r``
    lo: np.ndarray
    #: float64 (C,)
    hi: np.ndarray
    #: bool (C,): the condition is negated (``not_equal``)
    neg: np.ndarray
    #: int64 (C,): how condition ``c`` joins the others (``AND_ALL``, ``IN_TERM``,
    #: ``ENDS_TERM``: :attr:`~streamjoin.query.Predicate.links`); the conjuncts come first
    link: np.ndarray


class Conditions(NamedTuple):
    """θ in the form kernels evaluate (docs/design.md §1) once an integer beyond ``2**52`` has been
    seen (:class:`ImageConditions` before): condition ``c`` holds iff
    ``lo[c] <= s_attrs[s_row[c]] - r_attrs[r_row[c]] <= hi[c]`` is not ``neg[c]``, the
    difference taken on the float64 images (:class:`~streamjoin.validation.Columns`) — unless
    ``ints[c]`` and both values are integers (their residual rows not NaN): then on the exact
    integers (:func:`int_diff_in`). θ is the AND of the ``AND_ALL`` conditions and, when
    there are terms, the OR of the terms (as in :class:`ImageConditions`)."""

    #: int64 (C,): row of r's attribute in an ``attrs`` matrix
    r_row: np.ndarray
    #: int64 (C,): row of s's attribute
    s_row: np.ndarray
    #: float64 (C,): closed bounds on the difference ``s - r``
    lo: np.ndarray
    #: float64 (C,)
    hi: np.ndarray
    #: bool (C,): the condition is negated (``not_equal``)
    neg: np.ndarray
    #: int64 (C,): how condition ``c`` joins the others, as in :class:`ImageConditions`
    link: np.ndarray
    #: bool (C,): decide the condition on exact integers when both values are integers
    ints: np.ndarray
    #: int64 (C,): row of r's attribute's residual (value minus image)
    r_res: np.ndarray
    #: int64 (C,): row of s's attribute's residual
    s_res: np.ndarray
    #: float64 (C, 4): the integer bounds ``ceil(lo)`` and ``floor(hi)``, each split into
    #: halves (:func:`split_bounds`)
    split: np.ndarray
    #: float64 (C,): how far the images' difference may lie from the integers'
    #: (:func:`image_slack`); only a difference that close to a bound needs the integers
    slack: np.ndarray


_TWO32 = 4294967296.0
#: Bounds beyond any difference of two int64 values are clamped here (exactly representable,
#: and split into halves that the exact test subtracts without rounding).
_FAR = 2.0**66


def split_bounds(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each condition, ``ceil(lo)`` and ``floor(hi)`` — the integer bounds with the same
    meaning for an integer difference — clamped to ``±2**66`` and each written as
    ``h * 2**32 + l`` with ``0 <= l < 2**32``: float64 ``(C, 4)`` rows ``(lo_h, lo_l, hi_h,
    hi_l)``. Every step is exact in float64 (the parts are integers far below ``2**53``)."""
    out = np.empty((len(lo), 4))
    for col, bound in ((0, np.ceil(lo)), (2, np.floor(hi))):
        b = np.clip(bound, -_FAR, _FAR)
        h = np.floor(b * 2.0**-32)
        out[:, col] = h
        out[:, col + 1] = b - h * _TWO32
    return out


def image_slack(magnitude: float) -> float:
    """How far the exact difference of two integers' float64 images may lie from the
    integers' own difference, for integers up to ``magnitude``: each image is within half a
    unit in the last place (ulp) of its value, so ``u``, the ulp of ``magnitude``'s binade,
    bounds the sum. If ``lo <= s - r <= hi`` then ``lo - u <= image_s - image_r <= hi + u``,
    and since rounding is monotone the float64 difference an index computes lies in
    ``[fl(lo - u), fl(hi + u)]``: exactly the bounds float64 arithmetic gives for
    ``lo - u`` and ``hi + u``. So widening by ``u`` is enough, however large the bounds."""
    return math.ldexp(1.0, math.frexp(magnitude)[1] - 53)


@njit(cache=True, nogil=True)
def int_magnitude(attrs):
    """The largest magnitude of an integer in ``attrs`` (images, then residuals: an integer's
    residual is not NaN); 0 if none."""
    k = attrs.shape[0] // 2
    m = 0.0
    for a in range(k):
        for i in range(attrs.shape[1]):
            if attrs[k + a, i] == attrs[k + a, i]:
                m = max(m, abs(attrs[a, i]))
    return m


@njit(cache=True, nogil=True)
def _near_edge(d, lo, hi, slack):
    """Whether the images' float64 difference ``d`` leaves open which side of a bound the
    integers' difference lies on: it does not when ``|d| <= 2**52`` (then ``d`` is the images'
    exact difference, within ``slack`` of the integers') and no bound lies within ``slack``
    of it; ``lo <= d <= hi`` then decides, for integers as for floats."""
    if not abs(d) <= 2.0**52:
        return True
    return (d - slack < lo and lo <= d + slack) or (d - slack <= hi and hi < d + slack)


@njit(cache=True, nogil=True)
def _ints_decide(ok, r_image, r_res, s_image, s_res, split, c):
    """Condition ``c`` on the exact integers if both values are integers (a float's residual
    is NaN), else ``ok``, the images' float64 verdict. Called only near a bound."""
    if r_res == r_res and s_res == s_res:
        return int_diff_in(
            r_image, r_res, s_image, s_res, split[c, 0], split[c, 1], split[c, 2], split[c, 3]
        )
    return ok


@njit(cache=True, nogil=True)
def int_diff_in(r_image, r_res, s_image, s_res, lo_h, lo_l, hi_h, hi_l):
    """Whether ``s - r`` lies in ``[lo, hi]`` for two int64 values given as image and residual
    (``value = image + residual``) and bounds split by :func:`split_bounds` — exactly.

    Each value is written ``h * 2**32 + l`` (``h = floor(image / 2**32)``, ``l = image -
    h * 2**32 + residual``: integers, ``|h| <= 2**31``, ``|l| < 2**33``), so ``s - r - bound =
    X * 2**32 + Y`` with ``X`` and ``Y`` differences of such parts, each computed without
    rounding; the final sum rounds, but correct rounding never moves an integer across 0, so
    its sign is exact. No int64 arithmetic, so nothing wraps near ``±2**63``."""
    rh = np.floor(r_image * 2.0**-32)
    rl = (r_image - rh * _TWO32) + r_res
    sh = np.floor(s_image * 2.0**-32)
    sl = (s_image - sh * _TWO32) + s_res
    a = sh - rh
    b = sl - rl
    return ((a - lo_h) * _TWO32 + (b - lo_l) >= 0.0) and ((a - hi_h) * _TWO32 + (b - hi_l) <= 0.0)


def _int_verdict(ok, d, lo, hi, r_attrs, r_col, s_attrs, s_col, a, b, conds, c):
    """(jitted) Condition ``c``'s verdict ``ok`` on the images, decided again on the exact
    integers when ``d`` (their difference) is near a bound and both values are integers: r's
    value at ``r_attrs[a, r_col]``, s's at ``s_attrs[b, s_col]``. For
    :class:`ImageConditions`, ``ok`` as it is, and no code at all."""
    raise NotImplementedError


@overload(_int_verdict, inline="always")
def _int_verdict_ol(ok, d, lo, hi, r_attrs, r_col, s_attrs, s_col, a, b, conds, c):
    if getattr(conds, "instance_class", None) is ImageConditions:
        return lambda ok, d, lo, hi, r_attrs, r_col, s_attrs, s_col, a, b, conds, c: ok

    def exact(ok, d, lo, hi, r_attrs, r_col, s_attrs, s_col, a, b, conds, c):
        if conds.ints[c] and _near_edge(d, lo, hi, conds.slack[c]):
            r_res, s_res = r_attrs[conds.r_res[c], r_col], s_attrs[conds.s_res[c], s_col]
            return _ints_decide(
                ok, r_attrs[a, r_col], r_res, s_attrs[b, s_col], s_res, conds.split, c
            )
        return ok

    return exact


@njit(cache=True, nogil=True, inline="always")
def theta_oriented(p_attrs, i, c_attrs, j, conds, first, orient):
    """Conditions ``first..`` of θ (see :class:`Conditions`) between probing tuple ``i`` and
    candidate ``j`` in orientation ``orient``: θ(probe, cand) for ``R_PROBES``, θ(cand,
    probe) for ``S_PROBES``, either for ``EITHER``. Conditions before ``first`` are conjuncts
    an index has checked.

    θ is ``AND(conjuncts) AND OR(terms)``: a conjunct that fails ends an orientation, a term's
    condition that fails only its term; the first term that holds decides, and with terms none
    holding θ fails. One loop over the conditions serves both orientations: a helper called
    once per orientation kept numba from inlining it, and the in-batch sweep ran 10x slower."""
    as_r = orient != S_PROBES  # θ(probe, cand) may decide (the current term holds so far)
    as_s = orient != R_PROBES  # θ(cand, probe) may decide
    all_r, all_s = as_r, as_s  # the conjuncts hold
    n = conds.lo.shape[0]
    for c in range(first, n):
        a, b = conds.r_row[c], conds.s_row[c]
        lo, hi, neg = conds.lo[c], conds.hi[c], conds.neg[c]
        if as_r:
            d = c_attrs[b, j] - p_attrs[a, i]
            ok = (d >= lo) & (d <= hi)
            ok = _int_verdict(ok, d, lo, hi, p_attrs, i, c_attrs, j, a, b, conds, c)
            as_r = ok != neg
        if as_s:
            d = p_attrs[b, i] - c_attrs[a, j]
            ok = (d >= lo) & (d <= hi)
            ok = _int_verdict(ok, d, lo, hi, c_attrs, j, p_attrs, i, a, b, conds, c)
            as_s = ok != neg
        link = conds.link[c]
        if link == AND_ALL:
            if not (as_r or as_s):
                return False
            all_r, all_s = as_r, as_s
        elif link == ENDS_TERM:
            if as_r or as_s:
                return True
            as_r, as_s = all_r, all_s  # the next term starts where the conjuncts left
    return (as_r or as_s) and conds.link[n - 1] == AND_ALL


@njit(cache=True, nogil=True)
def probe_pairs(
    probing, p_pos, c_attrs, c_rows, c_at, conds, first, orient, min_idx, probe_is_r, r_earlier
):
    """The pairs among candidates: ``(r_seq, s_seq, ingest_ns)``, one pass over them.

    Candidate ``t`` pairs the probing tuple at column ``p_pos[t]`` of ``probing`` (a batch's
    :class:`~streamjoin.batch.TupleColumns`) with the stored tuple at row ``c_at[t]`` of
    ``c_rows`` (a tuple store's int64 rows, fields as in
    :data:`~streamjoin.actors.store.ROW_FIELDS`) and column ``c_at[t]`` of ``c_attrs``. It is
    kept iff the earlier of the two is in the later one's window, the stored tuple's
    ``idx >= min_idx``, and θ holds (conditions before ``first`` were already checked by the
    index). Window check (docs/design.md §2 step 1): ``c_idx >= p_lo_idx`` when the candidate arrived
    first; a stored candidate can also be the *later* tuple when the two streams reach a core
    by different paths (a DP-Join grid), and then ``p_idx >= c_lo_idx``. ``probe_is_r``: the
    probing tuple is the pair's r (else the stored one is, as for a self-join, whose r is the
    earlier). ``r_earlier``: keep only pairs whose r arrived strictly first (a self-join run as
    the stream joined with itself, :class:`~streamjoin.actors.join_spec.JoinSpec`'s
    ``paired``: of the two meetings of a pair's copies, and of a tuple with itself, only one
    counts). A pair's ingest time is the later of its two tuples'.
    """
    p_attrs, p_seq, p_idx = probing.attrs, probing.seq, probing.idx
    p_lo_idx, p_ingest = probing.lo_idx, probing.ingest_ns
    m = p_pos.shape[0]
    r = np.empty(m, dtype=np.int64)
    s = np.empty(m, dtype=np.int64)
    ingest = np.empty(m, dtype=np.int64)
    residual = first < conds.lo.shape[0]  # a band the index checked leaves the window only
    width = c_rows.shape[1]
    n_attrs, cap = c_attrs.shape[0], c_attrs.shape[1]
    n_attrs //= 2  # images only: a residual is read for a difference near a bound only
    n = 0
    for t in range(m):
        if t + _AHEAD < m:  # stored rows are scattered: fetch them a few ahead
            ahead = c_at[t + _AHEAD]
            prefetch(c_rows, ahead * width)
            if residual:  # and the attributes θ reads (a coded index's refinement)
                for a in range(n_attrs):
                    prefetch(c_attrs, a * cap + ahead)
        i = p_pos[t]
        j = c_at[t]
        c_seq = c_rows[j, SEQ]
        c_idx = c_rows[j, IDX]
        if r_earlier and not (p_seq[i] < c_seq if probe_is_r else c_seq < p_seq[i]):
            continue
        in_window = c_idx >= p_lo_idx[i] if c_seq < p_seq[i] else p_idx[i] >= c_rows[j, LO_IDX]
        if not in_window or c_idx < min_idx:
            continue
        if residual and not theta_oriented(p_attrs, i, c_attrs, j, conds, first, orient):
            continue
        if probe_is_r:
            r[n] = p_seq[i]
            s[n] = c_seq
        else:
            r[n] = c_seq
            s[n] = p_seq[i]
        ingest[n] = max(p_ingest[i], c_rows[j, INGEST_NS])
        n += 1
    return r[:n], s[:n], ingest[:n]


@njit(cache=True, nogil=True)
def pairs_within_batch(idx, lo_idx, attrs, probe, cand, conds, first, orient):
    """Of candidate pairs ``(probe[t], cand[t])`` (positions in one seq-ordered batch, found by
    an index over the batch's own tuples), those whose candidate came first and is in the
    probing tuple's window and for which θ holds (conditions before ``first`` were checked
    by the index): ``(i, j)`` int64, ``j < i``. docs/design.md §2 step 2 by index rather than sweep."""
    m = probe.shape[0]
    out_i = np.empty(m, dtype=np.int64)
    out_j = np.empty(m, dtype=np.int64)
    n = 0
    for t in range(m):
        i, j = probe[t], cand[t]
        if (
            j < i
            and idx[j] >= lo_idx[i]
            and theta_oriented(attrs, i, attrs, j, conds, first, orient)
        ):
            out_i[n] = i
            out_j[n] = j
            n += 1
    return out_i[:n], out_j[:n]


@njit(cache=True, nogil=True)
def join_within_batch(columns, key_r, key_s, key_lo, key_hi, conds, self_join, by_r, by_s):
    """Pairs ``(i, j)``, ``j < i``, of one seq-ordered batch (``columns``, its
    :class:`~streamjoin.batch.TupleColumns`): ``j`` is of ``i``'s opposite stream (its own for
    a self-join), in ``i``'s window (``idx[j] >= lo_idx[i]``) and θ holds.

    docs/design.md §2 step 2 (PIM-Tree §4's edge tuple: what is not indexed yet is scanned).
    ``key_r`` / ``key_s`` (float64, one per tuple) are the R and S tuples' keys on the indexed
    condition, ``s - r`` in ``[key_lo, key_hi]`` when it holds (all zeros and unbounded when no
    condition is indexed); ``by_r`` / ``by_s`` hold the positions of each stream's tuples in
    key order (for a self-join ``by_r`` holds them all). The probing stream's tuples sweep the
    probed stream's keys with a pointer that only moves forward, so the cost is
    O(b + candidates in range) after the sort, with no binary search per tuple.
    """
    b = columns.idx.shape[0]
    by_stream = (by_r, by_s)
    cap = 2 * b + 64
    while True:
        out_i = np.empty(cap, dtype=np.int64)
        out_j = np.empty(cap, dtype=np.int64)
        n = _sweep_batch(
            key_r, key_s, key_lo, key_hi, columns, conds, self_join, by_stream, out_i, out_j
        )
        if n <= cap:
            return out_i[:n], out_j[:n]
        cap = n  # rare: more pairs than the guess; the sweep is deterministic, run it again


@njit(cache=True, nogil=True)
def _sweep_batch(key_r, key_s, key_lo, key_hi, columns, conds, self_join, by_stream, out_i, out_j):
    """:func:`join_within_batch`'s sweep; writes up to ``len(out_i)`` pairs, returns how many
    it found."""
    idx, lo_idx, attrs = columns.idx, columns.lo_idx, columns.attrs
    n = 0
    for x in range(1 if self_join else 2):
        xs = by_stream[x]
        ys = by_stream[x if self_join else 1 - x]
        key_x = key_r if x == 0 else key_s
        key_y = key_r if self_join or x == 1 else key_s
        if self_join:
            orient = EITHER
            lo_d, hi_d = min(key_lo, -key_hi), max(key_hi, -key_lo)
        elif x == 0:
            orient = R_PROBES
            lo_d, hi_d = key_lo, key_hi
        else:
            orient = S_PROBES
            lo_d, hi_d = -key_hi, -key_lo
        start = 0
        for a in range(xs.shape[0]):
            i = xs[a]
            vlo, vhi = key_range(key_x[i], lo_d, hi_d)
            # keys below an earlier (smaller) probe key's interval fail this one's too
            while start < ys.shape[0] and key_y[ys[start]] < vlo:
                start += 1
            t = start
            while t < ys.shape[0] and key_y[ys[t]] <= vhi:
                j = ys[t]
                if (
                    j < i
                    and idx[j] >= lo_idx[i]
                    and theta_oriented(attrs, i, attrs, j, conds, 0, orient)
                ):
                    if n < out_i.shape[0]:
                        out_i[n] = i
                        out_j[n] = j
                    n += 1
                t += 1
    return n
