"""Hypothesis strategies for random small join inputs and queries (shared by the tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import streamjoin as sj

INT_VALUES = st.integers(-6, 6)
#: int64 values a few apart around bases where float64 images round (ulp 2**10 near 2**62),
#: at both ends of int64 (differences overflow it), and at 2**53 and -(2**52 + 7), whose
#: differences pass 2**53 and round: compared exactly or wrong
WIDE_BASES = [2**62, -(2**63) + 6, 2**63 - 7, 2**53, -(2**52) - 7, 0]
WIDE_INT_VALUES = st.builds(
    lambda base, offset: base + offset, st.sampled_from(WIDE_BASES), st.integers(-6, 6)
)
FLOAT_VALUES = st.sampled_from([-2.5, -1.0, -0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 1e-300, -1e-300])


KINDS = ["band", "band_lohi", "equal", "not_equal", "less", "less_equal", "greater"]
KINDS += ["greater_equal"]


@st.composite
def conditions(draw, attr: str):
    """One condition on r's ``attr``; s's attribute is the same, or (a third of the time) the
    other of ``x`` and ``y`` (a cross-attribute condition)."""
    kind = draw(st.sampled_from(KINDS))
    other = draw(st.sampled_from([attr, attr, {"x": "y", "y": "x"}[attr]]))
    if kind == "band":
        return sj.band(attr, draw(st.sampled_from([0, 0.5, 1, 2, 3])), other)
    if kind == "band_lohi":
        lo = draw(st.sampled_from([-3, -1, 0, 0.5, 1]))
        return sj.band(attr, None, other, lo=lo, hi=lo + draw(st.sampled_from([0, 1, 2.5])))
    if kind in ("less", "less_equal", "greater", "greater_equal") and draw(st.booleans()):
        # a shifted inequality, r.attr + c OP s.other
        shift = draw(st.sampled_from([-3, -1, -0.5, 1, 2, 2.5]))
        return getattr(sj, kind)(attr, other, shift=shift)
    return getattr(sj, kind)(attr, other)


@st.composite
def predicates(draw):
    pred = draw(conditions("x"))
    if draw(st.booleans()):
        pred = pred & draw(conditions(draw(st.sampled_from(["x", "y"]))))
    return pred


@st.composite
def windows(draw):
    if draw(st.booleans()):
        return sj.CountWindow(draw(st.integers(1, 8)), draw(st.integers(1, 8)))
    return sj.TimeWindow(draw(st.integers(1, 8)), draw(st.integers(1, 8)))


def _column(values: list) -> np.ndarray:
    """Python ints as int64 (numpy would pick uint64 or object beyond it), floats as float64."""
    if values and all(isinstance(v, int) for v in values):
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=np.float64)


@st.composite
def tables(draw, self_join: bool, max_rows: int = 60):
    """A dict-of-arrays input: random streams, ts non-decreasing per stream (not across
    streams), int or float attributes with many duplicates, equal timestamps; a third of
    the time ``x`` holds int64 values near the int64 limits and others beyond 2**52
    (:data:`WIDE_INT_VALUES`), and ``y`` a quarter of the time."""
    n = draw(st.integers(0, max_rows))
    values = draw(st.sampled_from([INT_VALUES, FLOAT_VALUES, WIDE_INT_VALUES]))
    y_values = draw(st.sampled_from([INT_VALUES, INT_VALUES, INT_VALUES, WIDE_INT_VALUES]))
    stream = np.zeros(n, dtype=np.int8)
    if not self_join:
        stream = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int8)
    steps = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
    offsets = np.array([draw(st.integers(0, 6)), draw(st.integers(0, 6))])
    ts = np.empty(n, dtype=np.int64)
    for s in (0, 1):
        rows = stream == s
        ts[rows] = offsets[s] + np.cumsum(steps[rows])
    data = {
        "ts": ts,
        "x": _column(draw(st.lists(values, min_size=n, max_size=n))),
        "y": _column(draw(st.lists(y_values, min_size=n, max_size=n))),
    }
    if not self_join:
        data["stream"] = stream
    return data
