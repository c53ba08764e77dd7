"""numba kernels of the join core: exact candidate filtering and the batch's self-join.

Orientation codes: ``R_PROBES`` (the probing tuple is r, the candidate s), ``S_PROBES`` (the
probing tuple is s), ``EITHER`` (self-join: θ(cand, probe) or θ(probe, cand)).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from streamjoin.indexes.base import grow, key_range

R_PROBES = 0
S_PROBES = 1
EITHER = 2


@njit(cache=True, nogil=True, inline="always")
def theta(r_attrs, ri, s_attrs, sj, cond_attr, lo, hi, first):
    """Conditions ``first..`` of θ(r, s): ``lo[c] <= s[a_c] - r[a_c] <= hi[c]``."""
    for c in range(first, lo.shape[0]):
        a = cond_attr[c]
        d = s_attrs[a, sj] - r_attrs[a, ri]
        if not ((d >= lo[c]) & (d <= hi[c])):
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def theta_oriented(p_attrs, i, c_attrs, j, cond_attr, lo, hi, first, orient):
    """θ between probing tuple ``i`` and candidate ``j`` in orientation ``orient``."""
    if orient == R_PROBES:
        return theta(p_attrs, i, c_attrs, j, cond_attr, lo, hi, first)
    if orient == S_PROBES:
        return theta(c_attrs, j, p_attrs, i, cond_attr, lo, hi, first)
    return theta(c_attrs, j, p_attrs, i, cond_attr, lo, hi, first) or theta(
        p_attrs, i, c_attrs, j, cond_attr, lo, hi, first
    )


@njit(cache=True, nogil=True)
def filter_candidates(
    p_attrs, p_seq, p_idx, p_lo_idx, p_pos,
    c_attrs, c_seq, c_idx, c_lo_idx, c_rows,
    cond_attr, lo, hi, first, orient,
):  # fmt: skip
    """Keep candidate ``t`` iff the earlier of the two is in the later one's window and θ holds.

    ``p_pos[t]`` is the probing tuple's column in the ``p_*`` arrays; ``c_rows[t]`` the
    candidate's column in the ``c_*`` arrays. Conditions before ``first`` were already checked
    by the index. Window check (DESIGN §2 step 1): ``c_idx >= p_lo_idx`` when the candidate
    arrived first; a stored candidate can also be the *later* tuple when the two streams reach
    a core by different paths (a DP-Join grid), and then ``p_idx >= c_lo_idx``.
    """
    keep = np.empty(p_pos.shape[0], dtype=np.bool_)
    residual = first < lo.shape[0]  # a single band the index checked leaves the window only
    for t in range(p_pos.shape[0]):
        i = p_pos[t]
        j = c_rows[t]
        in_window = c_idx[j] >= p_lo_idx[i] if c_seq[j] < p_seq[i] else p_idx[i] >= c_lo_idx[j]
        keep[t] = in_window and (
            not residual or theta_oriented(p_attrs, i, c_attrs, j, cond_attr, lo, hi, first, orient)
        )
    return keep


@njit(cache=True, nogil=True)
def join_within_batch(stream, idx, lo_idx, attrs, cond_attr, lo, hi, self_join):
    """Pairs ``(i, j)``, ``j < i``, of one seq-ordered batch: ``j`` is of ``i``'s opposite
    stream (its own for a self-join), in ``i``'s window (``idx[j] >= lo_idx[i]``) and θ holds.

    DESIGN §2 step 2 (PIM-Tree §4's edge tuple: what is not indexed yet is scanned). Each
    stream's tuples are sorted on the primary attribute and every tuple range-searches the
    other's, so the cost is O(b log b + candidates in range) rather than O(b²).
    """
    b = stream.shape[0]
    key = attrs[cond_attr[0]]
    lo0 = lo[0]
    hi0 = hi[0]
    out_i = np.empty(64, dtype=np.int64)
    out_j = np.empty(64, dtype=np.int64)
    n = 0
    for y in range(2):
        if self_join and y == 1:
            break
        ypos = np.flatnonzero(stream == y)
        if ypos.shape[0] == 0:
            continue
        order = np.argsort(key[ypos], kind="mergesort")
        ypos = ypos[order]
        ykeys = key[ypos]
        for i in range(b):
            x = stream[i]
            if self_join:
                orient = EITHER
                lo_d = min(lo0, -hi0)
                hi_d = max(hi0, -lo0)
            elif x == y:
                continue
            elif x == 0:
                orient = R_PROBES
                lo_d = lo0
                hi_d = hi0
            else:
                orient = S_PROBES
                lo_d = -hi0
                hi_d = -lo0
            vlo, vhi = key_range(key[i], lo_d, hi_d)
            start = np.searchsorted(ykeys, vlo, side="left")
            end = np.searchsorted(ykeys, vhi, side="right")
            for t in range(start, end):
                j = ypos[t]
                if (
                    j < i
                    and idx[j] >= lo_idx[i]
                    and theta_oriented(attrs, i, attrs, j, cond_attr, lo, hi, 0, orient)
                ):
                    if n == out_i.shape[0]:
                        out_i = grow(out_i, n + 1)
                        out_j = grow(out_j, n + 1)
                    out_i[n] = i
                    out_j[n] = j
                    n += 1
    return out_i[:n], out_j[:n]
