"""The oracle itself, checked by hand-worked cases and against SQL in DuckDB."""

import math

import duckdb
import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj


def pairs(table):
    return sorted(zip(table.column("r").to_pylist(), table.column("s").to_pylist(), strict=True))


def test_count_window_by_hand():
    # rows: 0:R5 1:S5 2:R6 3:S4 4:R5 ; window of 1 tuple per stream
    data = {"stream": np.array([0, 1, 0, 1, 0]), "x": np.array([5, 5, 6, 4, 5])}
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(1))
    # row1 S5 sees R{0}: (0,1). row2 R6 sees S{1}: (2,1). row3 S4 sees R{2}: 6-4=2 no.
    # row4 R5 sees S{3}: |5-4|=1 yes (4,3).
    assert pairs(sj.oracle.join(q, data)) == [(0, 1), (2, 1), (4, 3)]


def test_asymmetric_count_window_by_hand():
    data = {"stream": np.array([0, 0, 0, 1]), "x": np.array([1, 1, 1, 1])}
    # S arrives last and sees the last w_r = 2 R tuples
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(2, 5))
    assert pairs(sj.oracle.join(q, data)) == [(1, 3), (2, 3)]


def test_time_window_inclusive_by_hand():
    data = {"stream": np.array([0, 1, 1]), "ts": np.array([10, 15, 16]), "x": np.array([0, 0, 0])}
    q = sj.Query(sj.equal("x"), window=sj.TimeWindow(5))
    assert pairs(sj.oracle.join(q, data)) == [(0, 1)]  # 15 - 10 <= 5, 16 - 10 > 5


def test_self_join_either_orientation_by_hand():
    data = {"x": np.array([3, 1, 2])}
    q = sj.Query(sj.less("x"), window=sj.CountWindow(10), self_join=True)
    # θ(a,b) or θ(b,a) with less: any two distinct values; r is the older row
    assert pairs(sj.oracle.join(q, data)) == [(0, 1), (0, 2), (1, 2)]


def test_inequality_direction_by_hand():
    data = {"stream": np.array([0, 1, 1]), "x": np.array([2, 3, 1])}
    assert pairs(sj.oracle.join(sj.Query(sj.less("x"), sj.CountWindow(5)), data)) == [(0, 1)]
    assert pairs(sj.oracle.join(sj.Query(sj.greater("x"), sj.CountWindow(5)), data)) == [(0, 2)]


def test_cross_attribute_interval_overlap_by_hand():
    # r.start <= s.end AND r.end >= s.start: rows 0 R[1,5], 1 S[4,8], 2 S[6,9], 3 R[9,9]
    data = {
        "stream": np.array([0, 1, 1, 0]),
        "start": np.array([1, 4, 6, 9]),
        "end": np.array([5, 8, 9, 9]),
    }
    overlap = sj.less_equal("start", "end") & sj.greater_equal("end", "start")
    q = sj.Query(overlap, window=sj.CountWindow(5))
    assert str(q.predicate) == "r.start <= s.end AND r.end >= s.start"
    # R[1,5] meets S[4,8]; R[9,9] meets S[6,9] (9 <= 9, 9 >= 6), not S[4,8] (9 > 8)
    assert pairs(sj.oracle.join(q, data)) == [(0, 1), (3, 2)]
    # |r.start - s.end| <= 1: only R[9,9], with S[4,8] and S[6,9]
    near = sj.Query(sj.band("start", 1, "end"), sj.CountWindow(5))
    assert pairs(sj.oracle.join(near, data)) == [(3, 1), (3, 2)]


def test_cross_attribute_self_join_closure_by_hand():
    # θ(a, b) = a.x < b.y; pair (a older, b newer) iff a.x < b.y or b.x < a.y
    data = {"x": np.array([5, 1, 9]), "y": np.array([0, 6, 2])}
    q = sj.Query(sj.less("x", "y"), window=sj.CountWindow(10), self_join=True)
    # (0,1): 5 < 6 yes. (0,2): 5 < 2 no, 9 < 0 no. (1,2): 1 < 2 yes.
    assert pairs(sj.oracle.join(q, data)) == [(0, 1), (1, 2)]


def test_not_equal_by_hand():
    data = {"stream": np.array([0, 1, 1, 0]), "k": np.array([1, 1, 2, 2])}
    q = sj.Query(sj.not_equal("k"), window=sj.CountWindow(5))
    assert str(q.predicate) == "r.k != s.k"
    # row1 S1 sees R0 (1 == 1: no); row2 S2 sees R0 (yes); row3 R2 sees S1 (yes), S2 (no)
    assert pairs(sj.oracle.join(q, data)) == [(0, 2), (3, 1)]


def test_empty_input():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(3))
    empty = {"stream": np.array([], np.int8), "x": np.array([], float)}
    assert len(sj.oracle.join(q, empty)) == 0


def _sql_condition(query, r, s, ints):
    """θ in SQL: between two integer columns (``ints``) the difference in 128-bit integers
    against the integer bounds ``ceil(lo)``, ``floor(hi)``; else in DOUBLE."""
    parts = []
    for c in query.predicate:
        if c.attr in ints and c.attr_s in ints:
            d = f"({s}.{c.attr_s}::HUGEINT - {r}.{c.attr}::HUGEINT)"
            terms = [f"{d} >= {math.ceil(c.lo)}"] if math.isfinite(c.lo) else []
            terms += [f"{d} <= {math.floor(c.hi)}"] if math.isfinite(c.hi) else []
            inside = " AND ".join(terms) or "TRUE"
        else:
            d = f"({s}.{c.attr_s}::DOUBLE - {r}.{c.attr}::DOUBLE)"
            inside = f"{d} >= {c.lo!r} AND {d} <= {c.hi!r}".replace("inf", "'inf'::DOUBLE")
        parts.append(f"NOT ({inside})" if c.negated else f"({inside})")
    return " AND ".join(parts)


def duckdb_join(query, data) -> list[tuple[int, int]]:
    """The definition of docs/design.md §1 in SQL, independent of the oracle's code."""
    n = len(data["x"])
    stream = data.get("stream", np.zeros(n, np.int8))
    t = {
        "g": np.arange(n),
        "stream": stream.astype(np.int64),
        "ts": data["ts"],
        "x": data["x"],
        "y": data["y"],
    }
    ints = {a for a in ("x", "y") if np.issubdtype(data[a].dtype, np.integer)}
    con = duckdb.connect()
    con.register("raw", t)
    con.execute(
        "CREATE TABLE t AS SELECT *, row_number() OVER (PARTITION BY stream ORDER BY g) - 1 AS idx,"
        " g - (row_number() OVER (PARTITION BY stream ORDER BY g) - 1) AS other_before FROM raw"
    )
    w = query.window
    if query.self_join:
        win = f"b.idx - a.idx <= {w.r}" if w.kind == "count" else f"b.ts - a.ts <= {w.r}"
        theta = f"(({_sql_condition(query, 'a', 'b', ints)}) OR ({_sql_condition(query, 'b', 'a', ints)}))"
        sql = f"SELECT a.g, b.g FROM t a JOIN t b ON a.g < b.g AND {win} AND {theta}"
    else:
        # later x of stream X sees y of Y iff y.idx >= (#Y before x) - w_Y (count) or
        # x.ts - y.ts <= t_Y (time); #Y before x = x.g - x.idx
        def win(x, y, size):
            if w.kind == "count":
                return f"{y}.idx >= ({x}.g - {x}.idx) - {size}"
            return f"{x}.ts - {y}.ts <= {size}"

        theta = _sql_condition(query, "r", "s", ints)
        sql = (
            "SELECT r.g, s.g FROM t r JOIN t s ON r.stream = 0 AND s.stream = 1 AND "
            f"{theta} AND ((r.g < s.g AND {win('s', 'r', w.r)}) OR "
            f"(s.g < r.g AND {win('r', 's', w.s)}))"
        )
    return sorted(tuple(map(int, row)) for row in con.execute(sql).fetchall())


@settings(max_examples=examples(150), deadline=None)
@given(st.data())
def test_oracle_matches_sql(data):
    self_join = data.draw(st.booleans())
    table = data.draw(tables(self_join))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    assert pairs(sj.oracle.join(query, table)) == duckdb_join(query, table)


def test_same_pairs_reports_missing_extra_duplicates():
    exp = {"r": np.array([0, 1, 2]), "s": np.array([5, 5, 5])}
    act = {"r": np.array([0, 0, 3]), "s": np.array([5, 5, 5])}
    cmp = sj.oracle.same_pairs(act, exp)
    assert not cmp
    assert cmp.missing.tolist() == [[1, 5], [2, 5]]
    assert cmp.extra.tolist() == [[3, 5]]
    assert cmp.duplicates.tolist() == [[0, 5]]
    assert "2 missing" in repr(cmp) and "1 extra" in repr(cmp) and "1 duplicated" in repr(cmp)
    assert sj.oracle.same_pairs(exp, {"r": exp["r"][::-1], "s": exp["s"]})
