"""Hypothesis strategies for random small join inputs and queries (shared by the tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import streamjoin as sj

INT_VALUES = st.integers(-6, 6)
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


@st.composite
def tables(draw, self_join: bool, max_rows: int = 60):
    """A dict-of-arrays input: random streams, ts non-decreasing per stream (not across
    streams), int or float attributes with many duplicates, equal timestamps."""
    n = draw(st.integers(0, max_rows))
    values = INT_VALUES if draw(st.booleans()) else FLOAT_VALUES
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
        "x": np.array(draw(st.lists(values, min_size=n, max_size=n))),
        "y": np.array(draw(st.lists(INT_VALUES, min_size=n, max_size=n))),
    }
    if not self_join:
        data["stream"] = stream
    return data
