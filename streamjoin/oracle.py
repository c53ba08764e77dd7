"""The reference join: docs/design.md §1 written as plainly as possible. The truth for every test.

It shares nothing with the fast paths but input validation: windows are computed from their
definition (not from the emitter's ``lo_idx``), and each arrival is compared with every earlier
tuple of the other stream. O(n · window) time; meant for inputs of a few thousand rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from streamjoin.query import Condition, Query
from streamjoin.validation import Columns, InputError, validate, values_of

_INT64_MIN = int(np.iinfo(np.int64).min)


def _theta(query: Query, attrs: np.ndarray, r, s) -> np.ndarray:
    """θ(r, s): every conjunct holds and, if the predicate has an OR, every condition of one
    of its terms does; a condition holds when ``lo <= s.attr_s - r.attr <= hi`` (outside
    ``[lo, hi]`` for ``not_equal``); ``r`` or ``s`` may be arrays. The difference of two floats
    (or of an integer and a float) is float64's; of two integers, exact: where either lies
    beyond ``2**52``, they are Python integers, compared with the bounds as Python compares an
    int with a float (exactly)."""
    pred = query.predicate
    rows = zip(pred.flat, *query.condition_rows, strict=True)
    holds = [_holds(len(query.attrs), attrs, r, s, *row) for row in rows]
    ok = np.logical_and.reduce(holds[: len(pred.conjuncts)] or [np.ones_like(holds[0])])
    if pred.terms:
        found, at = np.zeros_like(ok), len(pred.conjuncts)
        for term in pred.terms:
            found |= np.logical_and.reduce(holds[at : at + len(term)])
            at += len(term)
        ok &= found
    return ok


def _holds(k: int, attrs: np.ndarray, r, s, cond: Condition, kr: int, ks: int) -> np.ndarray:
    """Whether ``cond`` holds between r and s (as in :func:`_theta`): r's value at row ``kr``
    of ``attrs``, s's at ``ks``, their residuals ``k`` rows below."""
    r_val, s_val = np.broadcast_arrays(attrs[kr, r], attrs[ks, s])
    r_res, s_res = np.broadcast_arrays(attrs[k + kr, r], attrs[k + ks, s])
    d = s_val - r_val
    holds = np.atleast_1d((cond.lo <= d) & (d <= cond.hi))
    wide = ~np.isnan(r_res) & ~np.isnan(s_res) & (np.maximum(abs(r_val), abs(s_val)) > 2**52)
    for i in np.flatnonzero(np.atleast_1d(wide)):
        exact = _int(s_val, s_res, i) - _int(r_val, r_res, i)
        holds[i] = cond.lo <= exact <= cond.hi
    return holds.reshape(d.shape) != cond.negated


def _residuals(query: Query, attrs: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Which pairs ``(r[i], s[i])`` every residual function of the query keeps, each called on
    the pairs θ kept (r the R tuple, or a self-join's older one)."""
    k, at = len(query.attrs), {a: i for i, a in enumerate(query.attrs)}
    kept = np.ones(len(r), dtype=np.bool_)
    for f in query.predicate.residuals:

        def side(rows: np.ndarray, f=f) -> dict[str, np.ndarray]:
            return {c: values_of(attrs[at[c], rows], attrs[k + at[c], rows]) for c in f.columns}

        kept &= f.keep(side(r), side(s))
    return kept


def _int(image: np.ndarray, residual: np.ndarray, i: int | np.integer) -> int:
    """The integer at ``i`` of an image row and its residual row, as a Python int."""
    return int(np.atleast_1d(image)[i]) + int(np.atleast_1d(residual)[i])


def late_rows(query: Query, data) -> np.ndarray:
    """The input row numbers of the rows that are late under ``query.lateness`` (none without
    it): row *i* is late if its ``ts`` lies below ``max(ts of rows before i) - lateness``,
    decided in Python integers."""
    if query.lateness is None:
        return np.empty(0, dtype=np.int64)
    return _late(validate(data, query).ts, query.lateness)


def _late(ts: np.ndarray, lateness: int) -> np.ndarray:
    late, top = [], None
    for i, t in enumerate(ts.tolist()):
        if top is not None and t < top - lateness:
            late.append(i)
        top = t if top is None else max(top, t)
    return np.array(late, dtype=np.int64)


def join(query: Query, data) -> pa.Table:
    """All result pairs of ``query`` over ``data`` as a table with int64 columns ``r``, ``s``.

    ``r`` and ``s`` are input row numbers; for a self-join ``r`` is the older row. Rows are in
    order of the later tuple, then the earlier one. With ``query.lateness``, the join of the
    rows that are not late (:func:`late_rows`) stably sorted by ``ts``, their pairs by their
    input row numbers (a late row raises ``InputError`` unless ``query.on_late == "drop"``).
    An outer join (``query.how``) then adds ``(r, -1)`` for each kept R row (``"left"``,
    ``"full"``; a self-join's every row) and ``(-1, s)`` for each kept S row (``"right"``,
    ``"full"``) that no pair holds, in row order.
    """
    cols = validate(data, query)
    if query.lateness is None:
        return _outer(query, cols.stream & 1, np.arange(len(cols)), _join(query, cols))
    late = _late(cols.ts, query.lateness)
    if len(late) and query.on_late == "error":
        raise InputError(f"row {late[0]} is late under lateness {query.lateness}")
    on_time = np.setdiff1d(np.arange(len(cols)), late)
    order = on_time[np.argsort(cols.ts[on_time], kind="stable")]
    sorted_cols = Columns(cols.stream[order], cols.ts[order], cols.attrs[:, order])
    pairs = _join(query, sorted_cols)
    r = order[pairs.column("r").to_numpy()]
    s = order[pairs.column("s").to_numpy()]
    inner = pa.table({"r": r.astype(np.int64), "s": s.astype(np.int64)})
    return _outer(query, cols.stream[on_time] & 1, on_time, inner)


def _outer(query: Query, stream: np.ndarray, rows: np.ndarray, pairs: pa.Table) -> pa.Table:
    """``pairs`` and, for an outer join, each of ``rows`` (of ``stream``) whose side the join
    keeps and that no pair holds: ``(row, -1)`` for R (a self-join's one stream), ``(-1,
    row)`` for S."""
    keep_r, keep_s = query.keeps_unmatched
    if not (keep_r or keep_s):
        return pairs
    r, s = pairs.column("r").to_numpy(), pairs.column("s").to_numpy()
    out_r, out_s = [r], [s]
    for y, keep in ((0, keep_r), (1, keep_s)):
        if not keep:
            continue
        matched = np.concatenate([r, s]) if query.self_join else (r if y == 0 else s)
        alone = np.setdiff1d(rows[stream == y], matched)
        none = np.full(len(alone), -1, dtype=np.int64)
        out_r.append(alone if y == 0 else none)
        out_s.append(none if y == 0 else alone)
    return pa.table(
        {"r": np.concatenate(out_r).astype(np.int64), "s": np.concatenate(out_s).astype(np.int64)}
    )


def _join(query: Query, cols: Columns) -> pa.Table:
    """The pairs of ``cols`` in arrival order, by row number (docs/design.md §1)."""
    # a row that fails a filter of its side joins nothing (validate marks it: stream + 2)
    stream, ts, attrs, joins = cols.stream & 1, cols.ts, cols.attrs, cols.stream < 2
    n = len(stream)
    out_r: list[np.ndarray] = []
    out_s: list[np.ndarray] = []
    for g in range(n):
        x = stream[g]
        y = x if query.self_join else 1 - x
        earlier = np.flatnonzero(stream[:g] == y)  # filtered rows too: they hold window places
        if query.window.kind == "count":
            earlier = earlier[max(0, len(earlier) - query.window_size(y)) :]
        else:
            # x.ts - y.ts <= t  ⇔  y.ts >= x.ts - t, the bound in Python ints (int64 would wrap
            # for ts near ±2**63), clamped to the int64 range where every y.ts lies
            start = max(int(ts[g]) - query.window_size(y), _INT64_MIN)
            earlier = earlier[ts[earlier] >= start]
        if not joins[g]:
            continue
        earlier = earlier[joins[earlier]]
        if query.self_join:
            ok = _theta(query, attrs, g, earlier) | _theta(query, attrs, earlier, g)
            r, s = earlier[ok], np.full(int(ok.sum()), g)
        elif x == 0:
            ok = _theta(query, attrs, g, earlier)
            r, s = np.full(int(ok.sum()), g), earlier[ok]
        else:
            ok = _theta(query, attrs, earlier, g)
            r, s = earlier[ok], np.full(int(ok.sum()), g)
        if query.predicate.residuals and len(r):
            kept = _residuals(query, attrs, r, s)
            r, s = r[kept], s[kept]
        out_r.append(r)
        out_s.append(s)
    r = np.concatenate(out_r).astype(np.int64) if out_r else np.empty(0, np.int64)
    s = np.concatenate(out_s).astype(np.int64) if out_s else np.empty(0, np.int64)
    return pa.table({"r": r, "s": s})


def _pair_columns(pairs) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(pairs, "pairs") and not isinstance(pairs, pa.Table):  # a Result
        pairs = pairs.pairs
    if pairs is None:
        raise ValueError("this result kept no pairs (collect='count'); run with collect='pairs'")
    if isinstance(pairs, pa.Table):
        return pairs.column("r").to_numpy(), pairs.column("s").to_numpy()
    if isinstance(pairs, dict):
        return np.asarray(pairs["r"]), np.asarray(pairs["s"])
    if hasattr(pairs, "columns"):  # pandas
        return pairs["r"].to_numpy(), pairs["s"].to_numpy()
    r, s = pairs
    return np.asarray(r), np.asarray(s)


@dataclass(frozen=True)
class PairComparison:
    """Outcome of :func:`same_pairs`: truthy iff both sides hold the same pairs exactly once."""

    missing: np.ndarray  # (m, 2) pairs in expected but not in actual
    extra: np.ndarray  # (e, 2) pairs in actual but not in expected
    duplicates: np.ndarray  # (d, 2) pairs that actual holds more than once
    n_actual: int
    n_expected: int

    def __bool__(self) -> bool:
        return not (len(self.missing) or len(self.extra) or len(self.duplicates))

    def __repr__(self) -> str:
        if self:
            return f"same pairs ({self.n_expected})"
        parts = [f"pairs differ: {self.n_actual} actual vs {self.n_expected} expected"]
        for name, arr in (
            ("missing", self.missing),
            ("extra", self.extra),
            ("duplicated", self.duplicates),
        ):
            if len(arr):
                shown = ", ".join(f"(r={a}, s={b})" for a, b in arr[:5])
                more = f", … {len(arr) - 5} more" if len(arr) > 5 else ""
                parts.append(f"{len(arr)} {name}: {shown}{more}")
        return "; ".join(parts)

    __str__ = __repr__


def _as_keys(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(r, np.int64), np.asarray(s, np.int64)], axis=1)


def same_pairs(actual, expected) -> PairComparison:
    """Compare two pair sets (Result, pyarrow/pandas table, dict or ``(r, s)`` arrays).

    Pairs are compared as sets; a pair that ``actual`` holds twice is reported as duplicated.
    """
    a = _as_keys(*_pair_columns(actual))
    e = _as_keys(*_pair_columns(expected))
    a_u, a_counts = np.unique(a, axis=0, return_counts=True) if len(a) else (a, np.empty(0))
    e_u = np.unique(e, axis=0) if len(e) else e
    a_set = {tuple(p) for p in a_u.tolist()}
    e_set = {tuple(p) for p in e_u.tolist()}
    missing = np.array(sorted(e_set - a_set), dtype=np.int64).reshape(-1, 2)
    extra = np.array(sorted(a_set - e_set), dtype=np.int64).reshape(-1, 2)
    dups = a_u[a_counts > 1] if len(a) else a
    return PairComparison(missing, extra, dups.reshape(-1, 2), len(a), len(e))
