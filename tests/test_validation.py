"""Bad queries, inputs and settings get a clear error, raised before any work starts."""

import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import streamjoin as sj

Q = sj.Query(sj.band("x", 1), window=sj.CountWindow(4))
QT = sj.Query(sj.band("x", 1), window=sj.TimeWindow(4))


def good():
    return {"stream": np.array([0, 1, 0]), "ts": np.array([1, 2, 3]), "x": np.array([1.0, 2, 3])}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: sj.CountWindow(0), "count window size must be a positive integer, got 0"),
        (lambda: sj.CountWindow(2, -1), "must be a positive integer, got -1"),
        (lambda: sj.TimeWindow(1.5), "time window length must be a positive integer"),
        (lambda: sj.band("x", -1), "band eps must be >= 0"),
        (lambda: sj.band("x", lo=2, hi=1), "band lo must be <= hi"),
        (lambda: sj.band("x", float("nan")), "band eps must be finite"),
        (lambda: sj.band("x"), "band needs eps, or both lo= and hi="),
        (lambda: sj.band("x", 1, lo=0, hi=1), "either eps or lo/hi"),
        (lambda: sj.equal(""), "non-empty string"),
        (lambda: sj.less("ts"), "'ts' is a reserved column"),
        (lambda: sj.less("x", "ts"), "'ts' is a reserved column"),
        (lambda: sj.band("x", 1, ""), "non-empty string"),
        (lambda: sj.Query("x < y", window=sj.CountWindow(1)), "predicate must be built"),
        (lambda: sj.Query(sj.equal("x"), window=5), "window must be CountWindow"),
    ],
)
def test_query_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def drop(d, key):
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize(
    ("data", "query", "message"),
    [
        ({**good(), "x": np.array(["a", "b", "c"])}, Q, "join column 'x' must be int or float"),
        (drop(good(), "x"), Q, "input has no column 'x'"),
        (drop(good(), "stream"), Q, "two-way join needs a 'stream' column"),
        (drop(good(), "ts"), QT, "time window needs an int64 'ts' column"),
        ({**good(), "x": np.array([1.0, np.nan, 2])}, Q, "row 1 is nan"),
        ({**good(), "x": np.array([1.0, np.inf, 2])}, Q, "must be finite"),
        ({**good(), "stream": np.array([0, 2, 1])}, Q, "row 1 has 2"),
        ({**good(), "ts": np.array([5, 1, 4])}, QT, "decreases within stream R at row 2"),
        ({**good(), "ts": np.array([1.0, 2.0, 3.0])}, QT, "'ts' must be int64"),
        (
            {**good(), "x": np.array([1, 2**63, 3], np.uint64)},
            Q,
            "row 1 is 9223372036854775808, beyond",
        ),
        ({**good(), "x": np.array([True, False, True])}, Q, "must be int or float"),
        ({**good(), "x": np.array([1.0, 2.0])}, Q, "different lengths: stream=3, ts=3, x=2"),
        ([1, 2, 3], Q, "input must be a pyarrow Table, a pandas DataFrame or a dict"),
        (good(), sj.Query(sj.equal("x"), sj.CountWindow(2), self_join=True), "self-join reads"),
    ],
)
def test_input_errors_before_work(data, query, message):
    with pytest.raises(sj.InputError, match=message):
        sj.run(query, data)


def test_nulls_in_arrow_and_pandas():
    t = pa.table({"stream": [0, 1], "x": pa.array([1.0, None])})
    with pytest.raises(sj.InputError, match="'x' has 1 null"):
        sj.run(Q, t)
    df = pd.DataFrame({"stream": [0, 1], "x": pd.array([1, None], dtype="Int64")})
    with pytest.raises(sj.InputError, match="'x' has a null"):
        sj.run(Q, df)


def test_all_three_input_kinds_give_the_same_pairs():
    data = sj.sources.synthetic(300, low=0, high=30, seed=2)
    expected = sj.oracle.join(Q, data)
    assert sj.run(Q, data).same_pairs(expected)
    assert sj.run(Q, data.to_pandas()).same_pairs(expected)
    assert sj.run(Q, {c: data.column(c).to_numpy() for c in data.column_names}).same_pairs(expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer"),
        ({"backend": "spark"}, "unknown backend 'spark'"),
        ({"max_delay": -1}, "max_delay must be"),
        ({"collect": "all"}, "collect must be 'pairs' or 'count'"),
        ({"collect": "count", "ordered": True}, "ordered=True needs collect='pairs'"),
    ],
)
def test_run_setting_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sj.run(Q, good(), **kwargs)


def test_an_index_that_cannot_serve_the_query_says_so_and_the_answer_stays_exact():
    """``hash`` serves no band: the core scans its window and filters (a warning names the
    index); a cross-attribute condition in a self-join needs two keys per tuple, so the index
    serves the next condition instead."""
    data = sj.sources.synthetic(400, low=0, high=30, attrs=("x", "y"), seed=2)
    with pytest.warns(sj.indexes.IndexFallbackWarning, match="index 'hash' cannot serve .*scans"):
        res = sj.run(Q, data, sj.topologies.single("hash"))
    assert res.same_pairs(sj.oracle.join(Q, data))
    one = sj.sources.synthetic(400, low=0, high=30, attrs=("x", "y"), self_join=True, seed=3)
    q = sj.Query(sj.band("x", 1, "y") & sj.band("y", 2), sj.CountWindow(20), self_join=True)
    with pytest.warns(sj.indexes.IndexFallbackWarning, match="two keys per tuple.*serves"):
        res = sj.run(q, one, sj.topologies.single("bplus_tree"))
    assert res.same_pairs(sj.oracle.join(q, one))


def test_nested_loop_chosen_for_a_not_equal_says_nothing():
    """``nested_loop`` is the scan every index falls back to: asked for by name it does not
    warn that it falls back to itself."""
    q = sj.Query(sj.not_equal("x"), sj.CountWindow(20))
    data = sj.sources.synthetic(200, low=0, high=5, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sj.indexes.IndexFallbackWarning)
        res = sj.run(q, data, sj.topologies.single("nested_loop"))
    assert res.same_pairs(sj.oracle.join(q, data))


def test_missing_attribute_named_with_its_side():
    q = sj.Query(sj.less("x", "end"), window=sj.CountWindow(4))
    with pytest.raises(sj.InputError, match="no column 'end', which the query compares as s.end"):
        sj.run(q, good())


def test_unknown_index_fails_when_the_topology_is_built():
    with pytest.raises(ValueError, match="unknown index 'btree'"):
        sj.topologies.single("btree")


class _Chunks(sj.sources.Source):
    def __init__(self, chunks):
        self.chunks = chunks

    def __iter__(self):
        return iter(self.chunks)


def test_source_chunks_checked_across_chunk_boundaries():
    a = {"stream": np.array([0, 1]), "ts": np.array([5, 5]), "x": np.array([1.0, 1.0])}
    b = {"stream": np.array([0]), "ts": np.array([4]), "x": np.array([1.0])}
    with pytest.raises(sj.InputError, match="decreases within stream R at row 2"):
        sj.run(QT, _Chunks([a, b]))
    with pytest.raises(sj.InputError, match="row 2 has 3"):
        sj.run(Q, _Chunks([a, {**b, "stream": np.array([3])}]))


def test_source_equals_in_memory():
    data = sj.sources.synthetic(500, low=0, high=30, seed=4)
    expected = sj.oracle.join(QT, data)
    assert sj.run(QT, sj.sources.Stream(data, chunk_rows=37), batch_size=16).same_pairs(expected)
