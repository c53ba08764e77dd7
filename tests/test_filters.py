"""One-sided filters, ``r.x < 5`` (SQL's ``ON``): a tuple that fails a filter of its side joins
nothing but keeps its place in its stream's window. The oracle against DuckDB's SQL on the
same rows, every topology against the oracle, and the API's and the text's forms."""

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from layouts import LAYOUTS, every_layout, run_layout
from sql_windows import in_count_window, ranked
from strategies import tables

import streamjoin as sj
from streamjoin.query import FILTER_OPS
from streamjoin.query_text import parse_predicate

pytestmark = pytest.mark.filterwarnings("ignore::streamjoin.indexes.IndexFallbackWarning")

SQL_OPS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "<>"}


def _duckdb_pairs(table: pa.Table, window: int, band: float, filters) -> pa.Table:
    """The contract in SQL: (r, s) with |r.x - s.x| <= band, each filter on its side, and the
    earlier of the two among the last ``window`` rows of its stream before the later one
    (every row of that stream counts, filtered or not)."""
    rows = table.append_column("row", pa.array(np.arange(len(table))))  # noqa: F841
    where = " AND ".join(f"{f.side}.{f.attr} {SQL_OPS[f.op]} {f.value!r}" for f in filters)
    sql = f"""
        WITH {ranked()}
        SELECT r.row AS r, s.row AS s FROM t r, t s
        WHERE r.stream = 0 AND s.stream = 1 AND abs(r.x - s.x) <= {band}
          AND {where or "TRUE"} AND {in_count_window(window)}"""
    return duckdb.sql(sql).to_arrow_table()


def _pairs(res) -> list[tuple[int, int]]:
    pairs = res.pairs
    return sorted(zip(pairs.column("r").to_pylist(), pairs.column("s").to_pylist(), strict=True))


def _table(rng, n: int, kind_dtype=np.int64) -> pa.Table:
    return pa.table(
        {
            "stream": rng.integers(0, 2, n).astype(np.int8),
            "x": rng.integers(0, 40, n),
            "kind": rng.integers(0, 4, n).astype(kind_dtype),
            "price": rng.integers(0, 100, n) / 4,
        }
    )


@pytest.mark.parametrize(
    "filters",
    [
        [sj.r.kind == 2],
        [sj.s.kind != 3, sj.r.price < 12.5],
        [sj.r.price >= 20.25, sj.s.price <= 9.5, sj.s.kind > 0],
        [sj.r.kind < 1.5, sj.s.kind >= 0.5],  # fractional bounds on an integer column
    ],
)
@pytest.mark.parametrize("window", [3, 20])
def test_oracle_equals_duckdb(filters, window):
    rng = np.random.default_rng(window)
    table = _table(rng, 300)
    pred = sj.band("x", 2.0)
    for f in filters:
        pred = pred & f
    query = sj.Query(pred, window=sj.CountWindow(window))
    expected = _duckdb_pairs(table, window, 2.0, filters)
    assert len(expected) > 0
    assert sj.oracle.same_pairs(sj.oracle.join(query, table), expected)
    # a filtered row still holds its window place: the same query without the filtered
    # rows in the input has other pairs
    unfiltered = sj.oracle.join(sj.Query(sj.band("x", 2.0), window=sj.CountWindow(window)), table)
    assert len(unfiltered) > len(expected)


@st.composite
def filters(draw, values):
    """One or two filters on x or y of either side, against a value of the table (or near
    one), so that some rows pass and some fail."""
    out = []
    for _ in range(draw(st.integers(1, 2))):
        side, attr = draw(st.sampled_from("rs")), draw(st.sampled_from(["x", "y"]))
        value = draw(st.sampled_from(values)) if len(values) else 0
        if draw(st.booleans()) and isinstance(value, float):
            value = float(np.nextafter(value, np.inf))
        out.append(sj.Filter(side, attr, draw(st.sampled_from(FILTER_OPS)), value))
    return out


@every_layout(50, lateness=st.sampled_from([None, None, 0, 3]))
def test_every_layout_equals_the_oracle(
    self_join, data, predicate, window, layout, backend, batch_size, delivery_seed, lateness
):
    table = data.draw(tables(self_join))
    values = np.concatenate([table["x"], table["y"]]).tolist()
    for f in data.draw(filters(values)):
        predicate = predicate & f
    on_late = "error" if lateness is None else "drop"  # (a row behind the other stream is late)
    query = sj.Query(
        predicate, window=window, self_join=self_join, lateness=lateness, on_late=on_late
    )
    res = run_layout(query, table, layout, backend, batch_size, delivery_seed)
    if res is None:
        return
    assert res.same_pairs(sj.oracle.join(query, table))


def test_a_chunk_whose_rows_all_fail_joins_nothing_and_the_run_goes_on():
    n = 64
    data = {
        "stream": np.tile([0, 1], n // 2),
        "x": np.zeros(n),
        "kind": np.r_[np.zeros(32), np.ones(32)],
    }
    query = sj.Query(sj.band("x", 1.0) & (sj.r.kind == 1), window=sj.CountWindow(4))
    res = sj.run(query, data, batch_size=8, chunk_rows=8)
    assert res.same_pairs(sj.oracle.join(query, data))
    assert res.count > 0


def test_filters_with_out_of_order_input():
    rng = np.random.default_rng(5)
    n = 300
    data = pa.table(
        {
            "stream": rng.integers(0, 2, n),
            "x": rng.integers(0, 30, n),
            "kind": rng.integers(0, 3, n),
            "ts": np.arange(n) + rng.integers(0, 10, n),
        }
    )
    query = sj.Query(sj.band("x", 1.0) & (sj.s.kind == 0), window=sj.TimeWindow(30), lateness=10)
    res = sj.run(query, data, sj.topologies.split(2), batch_size=16)
    assert res.same_pairs(sj.oracle.join(query, data))


def test_integer_filters_are_exact_near_the_int64_limits():
    big = 2**63 - 1
    data = {
        "stream": np.array([0, 1, 0, 1]),
        "x": np.array([0, 0, 0, 0]),
        "id": np.array([big, big - 1, -(2**63), 7], dtype=np.int64),
    }
    query = sj.Query(sj.band("x", 0.0) & (sj.r.id == big), window=sj.CountWindow(4))
    assert _pairs(sj.run(query, data)) == [(0, 1), (0, 3)]
    # big - 1 > big - 2, though both are 2**63 as float64
    query = sj.Query(sj.band("x", 0.0) & (sj.s.id > big - 2), window=sj.CountWindow(4))
    assert _pairs(sj.run(query, data)) == [(0, 1), (2, 1)]


def test_a_missing_value_fails_every_filter_as_sql_null_does():
    frame = pd.DataFrame(
        {
            "stream": [0, 1, 0, 1],
            "x": [1.0, 1.0, 1.0, 1.0],
            "kind": pd.array([1, None, None, 1], dtype="Int64"),
            "w": [0.5, np.nan, 0.5, 0.5],
        }
    )
    for f in (sj.s.kind != 3, sj.s.w != 3.0):
        query = sj.Query(sj.band("x", 0.0) & f, window=sj.CountWindow(4))
        assert _pairs(sj.run(query, frame)) == [(0, 3), (2, 3)], (
            f
        )  # s row 1's value is missing: it joins nothing
        assert sj.oracle.same_pairs(sj.oracle.join(query, frame), sj.run(query, frame))


def test_api_forms_and_errors():
    f = sj.r["unit price"] >= 2
    assert (f.side, f.attr, f.op, f.value) == ("r", "unit price", ">=", 2)
    pred = (sj.s.kind != 3) & sj.less("a") & (sj.r.b < 0.5)
    assert str(pred) == "r.a < s.a AND s.kind != 3 AND r.b < 0.5"
    assert pred.conditions[0].kind == "less"
    with pytest.raises(ValueError, match="no condition between r and s"):
        sj.Query(sj.r.x < 3, window=sj.CountWindow(3))
    for bad in (float("nan"), float("inf"), "3", True, None):
        with pytest.raises(ValueError, match="r.x <"):
            sj.r.x < bad  # noqa: B015
    with pytest.raises(ValueError, match="reserved"):
        sj.r.ts < 3  # noqa: B015


def test_text_forms():
    pred = parse_predicate("r.a < s.a AND r.b > 5 AND 2.5 >= s.c, s.k = 3")
    assert str(pred) == "r.a < s.a AND r.b > 5 AND s.c <= 2.5 AND s.k == 3"
    (f,) = parse_predicate("|r.x - s.x| <= 1 and r.id = 9007199254740993").filters
    assert f.value == 9007199254740993  # exact, not the float64 nearest


def test_a_filter_on_a_column_of_text_is_a_clear_error():
    data = {"stream": np.array([0, 1]), "x": np.array([0, 0]), "kind": np.array(["a", "b"])}
    query = sj.Query(sj.band("x", 0.0) & (sj.r.kind == 1), window=sj.CountWindow(2))
    with pytest.raises(sj.InputError, match="filter column 'kind'"):
        sj.run(query, data)
    with pytest.raises(sj.InputError, match="no column 'kind'"):
        sj.run(query, {"stream": data["stream"], "x": data["x"]})


# the emitter drops filtered rows before any core; spo is also the default run's spo with
# direct workers on Ray (test_backends runs its trees)
@pytest.mark.parametrize("layout", ["grid", "spo"])
def test_filters_on_ray(ray_session, layout):
    data = sj.sources.synthetic(3_000, low=0, high=500, attrs=("x", "y"), seed=7)
    pred = sj.less("x") & sj.greater("y") if layout == "spo" else sj.band("x", 2)
    query = sj.Query(pred & (sj.r.y < 250) & (sj.s.x >= 100), window=sj.CountWindow(300))
    res = sj.run(query, data, LAYOUTS[layout](), backend="ray", batch_size=64)
    expected = sj.oracle.join(query, data)
    assert len(expected) > 0
    assert res.same_pairs(expected)
