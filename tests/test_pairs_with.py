"""``Result.pairs_with``: the pairs with their rows' columns, from pandas, Arrow and dict input,
two-way, self-join and out of order."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import streamjoin as sj


def _check(res, table: pa.Table, columns):
    got = res.pairs_with(table, columns)
    r, s = got.column("r").to_numpy(), got.column("s").to_numpy()
    assert got.column_names[:3] == ["r", "s", "latency_ns"]
    for c in columns:
        values = table.column(c).to_numpy()
        assert np.array_equal(got.column(f"r_{c}").to_numpy(), values[r])
        assert np.array_equal(got.column(f"s_{c}").to_numpy(), values[s])


@pytest.mark.parametrize("kind", ["arrow", "pandas", "dict"])
def test_pairs_with_the_rows_columns(kind):
    table = sj.sources.synthetic(3_000, attrs=("x", "y"), low=0, high=1_000, seed=1)
    data = {"arrow": table, "pandas": table.to_pandas(), "dict": table.to_pydict()}[kind]
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(200))
    res = sj.run(query, data, sj.topologies.split(2))
    assert res.count > 0
    _check(res, table, ["x", "y", "ts"])
    default = res.pairs_with(data)  # every column but stream
    assert "r_stream" not in default.column_names and "s_y" in default.column_names


def test_pairs_with_a_self_join_and_out_of_order_input():
    table = sj.sources.disorder(
        sj.sources.synthetic(3_000, self_join=True, low=0, high=500, seed=2), 30, seed=3
    )
    query = sj.Query(sj.less("x"), window=sj.TimeWindow(20), self_join=True, lateness=30)
    res = sj.run(query, table)
    _check(res, table, ["x", "ts"])
    # r is the earlier row in ts order: its ts never exceeds s's
    got = res.pairs_with(table, ["ts"])
    assert np.all(got.column("r_ts").to_numpy() <= got.column("s_ts").to_numpy())


def test_pairs_with_names_what_is_wrong():
    table = sj.sources.synthetic(500, seed=4)
    res = sj.run(sj.Query(sj.band("x", 1e9), window=sj.CountWindow(10)), table)
    with pytest.raises(ValueError, match="no column 'nope'"):
        res.pairs_with(table, ["nope"])
    with pytest.raises(ValueError, match="beyond the 100 rows of data"):
        res.pairs_with(table.slice(0, 100), ["x"])
    with pytest.raises(ValueError, match="in-memory input"):
        res.pairs_with([1, 2, 3], ["x"])
    counted = sj.run(sj.Query(sj.band("x", 1), window=sj.CountWindow(10)), table, collect="count")
    with pytest.raises(ValueError, match="collect='count'"):
        counted.pairs_with(table)


def test_a_missing_row_gives_nulls():
    table = pa.table({"stream": [0, 1], "ts": [0, 1], "x": [1.0, 1.0]})
    res = sj.run(sj.Query(sj.band("x", 0), window=sj.CountWindow(2)), table)
    res.pairs = pa.table({"r": [0, -1], "s": [1, 1], "latency_ns": [0, 0]})
    got = res.pairs_with(pd.DataFrame(table.to_pandas()), ["x"])
    assert got.column("r_x").to_pylist() == [1.0, None]
