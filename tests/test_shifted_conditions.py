"""Shifted inequalities, ``r.a + c OP s.b``: the oracle against DuckDB's SQL on the same rows,
the text form, and the bounds a strict comparison needs on integers."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import streamjoin as sj
from streamjoin.query_text import parse_predicate

OPS = {"<": sj.less, "<=": sj.less_equal, ">": sj.greater, ">=": sj.greater_equal}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shift", [-3, -0.5, 2, 7])
@pytest.mark.parametrize("kind", ["int", "float"])
def test_shifted_inequality_equals_duckdb(op, shift, kind):
    """A window that holds every earlier row: the result is every (r, s) pair whose condition
    holds, which SQL says directly."""
    rng = np.random.default_rng(abs(hash((op, shift, kind))) % 2**32)
    n = 400
    a = rng.integers(-20, 20, n) if kind == "int" else rng.integers(-40, 40, n) / 2
    b = rng.integers(-20, 20, n) if kind == "int" else rng.integers(-40, 40, n) / 2
    table = pa.table({"stream": rng.integers(0, 2, n).astype(np.int8), "a": a, "b": b})
    query = sj.Query(OPS[op]("a", "b", shift=shift), window=sj.CountWindow(n))
    res = sj.run(query, table, sj.topologies.split(2), batch_size=32)
    rows = table.append_column("row", pa.array(np.arange(n)))  # noqa: F841  (DuckDB reads it)
    sql = f"""SELECT r.row AS r, s.row AS s FROM rows r, rows s
        WHERE r.stream = 0 AND s.stream = 1 AND r.a + {shift} {op} s.b"""
    expected = duckdb.sql(sql).to_arrow_table()
    assert len(expected) > 0
    assert res.same_pairs(expected)
    assert sj.oracle.same_pairs(sj.oracle.join(query, table), expected)


def test_strict_shift_on_integers_is_strict():
    """r.a + 3 < s.b with s.b - r.a == 3 exactly: no pair; == 4: a pair."""
    for gap, pairs in ((3, 0), (4, 1)):
        data = {"stream": np.array([0, 1]), "a": np.array([10, 0]), "b": np.array([0, 10 + gap])}
        query = sj.Query(sj.less("a", "b", shift=3), window=sj.CountWindow(2))
        assert sj.run(query, data).count == pairs


def test_text_forms():
    assert str(parse_predicate("r.start + 10 <= s.end")) == "r.start + 10 <= s.end"
    assert str(parse_predicate("s.b - 2 > r.a")) == "r.a + 2 < s.b"
    assert str(parse_predicate("r.a - 3 < s.b + 2")) == "r.a - 5 < s.b"
    (eq,) = parse_predicate("r.a + 1.5 = s.b")
    assert (eq.lo, eq.hi) == (1.5, 1.5)
    with pytest.raises(ValueError, match="!= takes no constant"):
        parse_predicate("r.a + 1 != s.b")
    with pytest.raises(ValueError, match="within ±2\\*\\*53"):
        sj.less("a", shift=2.0**53)
