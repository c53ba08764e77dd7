"""A query's filters (:class:`~streamjoin.query.Filter`) decided on input rows, exactly.

:func:`~streamjoin.validation.validate` marks a row that fails a filter of its side by adding
2 to its ``stream`` value (so 2 is an R row and 3 an S row that join nothing): the mark then
travels with the row through every path a row takes before the emitter (chunks, the reorder
buffer, the Spark feed), which stamps the row, so that it keeps its place in its stream's
window, and drops it (:class:`~streamjoin.actors.emitter.Emitter`).
"""

from __future__ import annotations

import math

import numpy as np

from streamjoin.query import Filter, Query

#: Added to a row's ``stream`` when it fails a filter of its side.
FILTERED = 2
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def passes(query: Query, stream: np.ndarray, columns: dict[str, tuple]) -> np.ndarray | None:
    """Whether each row passes every filter of its side (bool), or None when the query has
    none. ``stream`` the rows' streams (0/1); ``columns[attr]`` a filter column's values and
    whether each is present (``(values, valid)``, ``valid`` None when all are). In a
    self-join every filter applies to every row."""
    filters = query.predicate.filters
    if not filters:
        return None
    ok = np.ones(len(stream), dtype=np.bool_)
    for f in filters:
        values, valid = columns[f.attr]
        holds = compare(values, f)
        if valid is not None:
            holds &= valid  # a missing value fails, as SQL's NULL
        if query.self_join:
            ok &= holds
        else:
            ok &= holds | (stream != (0 if f.side == "r" else 1))
    return ok


def compare(values: np.ndarray, f: Filter) -> np.ndarray:
    """``values OP f.value``, exact: integers as integers (a fractional value by the floor or
    ceiling the operator needs, a value beyond int64 by what it says of every int64), floats
    as float64 (NaN fails every comparison)."""
    if values.dtype.kind in "iub":
        return _compare_ints(values.astype(np.int64, copy=False), f.op, f.value)
    v = np.float64(f.value)
    with np.errstate(invalid="ignore"):
        holds = _OPS[f.op](values, v)
    if f.op == "!=":
        holds &= ~np.isnan(values)
    return holds


def _compare_ints(values: np.ndarray, op: str, value: int | float) -> np.ndarray:
    if isinstance(value, float) and not value.is_integer():
        if op in ("==", "!="):
            return np.full(len(values), op == "!=")
        # x < 2.5 iff x <= 2; x > 2.5 iff x >= 3
        value = math.floor(value) if op in ("<", "<=") else math.ceil(value)
        op = {"<": "<=", ">": ">="}.get(op, op)
    value = int(value)
    if value > _INT64_MAX or value < _INT64_MIN:  # the same answer for every int64
        above = value > _INT64_MAX
        every = {"<": above, "<=": above, ">": not above, ">=": not above}.get(op, op == "!=")
        return np.full(len(values), every)
    return _OPS[op](values, np.int64(value))


_OPS = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
}
