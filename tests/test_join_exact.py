"""The single join core through run(): always the oracle's answer (docs/design.md §1–2)."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj

BATCH_SIZES = (1, 3, 64, 4096)


def indexes_for(query):
    names = ["nested_loop"]
    if query.predicate.conditions[0].is_equality:
        names.append("hash")
    return names


@settings(max_examples=examples(120), deadline=None)
@given(st.data())
def test_single_core_equals_oracle(data):
    self_join = data.draw(st.booleans(), label="self_join")
    table = data.draw(tables(self_join))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    for index in indexes_for(query):
        for batch_size in BATCH_SIZES:
            res = sj.run(
                query,
                table,
                sj.topologies.single(index),
                batch_size=batch_size,
                chunk_rows=data.draw(st.sampled_from([1, 7, 1000]), label="chunk"),
            )
            cmp = res.same_pairs(expected)
            assert cmp, f"{index}, batch {batch_size}: {cmp}"


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_equi_join_hash_equals_oracle(data):
    self_join = data.draw(st.booleans())
    table = data.draw(tables(self_join, max_rows=120))
    pred = sj.equal("x")
    if data.draw(st.booleans()):
        pred = pred & sj.band("y", 2)
    query = sj.Query(pred, window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    for batch_size in BATCH_SIZES:
        res = sj.run(query, table, sj.topologies.single("hash"), batch_size=batch_size)
        assert res.same_pairs(expected)


@pytest.mark.parametrize("index", ["nested_loop", "hash"])
@pytest.mark.parametrize("window", [sj.CountWindow(1), sj.TimeWindow(1)])
@pytest.mark.parametrize("self_join", [False, True])
def test_edge_cases_window_of_one_equal_ts_duplicate_keys(index, window, self_join):
    n = 200
    rng = np.random.default_rng(3)
    data = {"ts": np.repeat(np.arange(n // 4), 4), "x": rng.integers(0, 3, n)}
    if not self_join:
        data["stream"] = rng.integers(0, 2, n)
    query = sj.Query(sj.equal("x"), window=window, self_join=self_join)
    expected = sj.oracle.join(query, data)
    assert len(expected) > 0
    for batch_size in BATCH_SIZES:
        res = sj.run(query, data, sj.topologies.single(index), batch_size=batch_size)
        assert res.same_pairs(expected)


@pytest.mark.parametrize("self_join", [False, True])
def test_empty_stream_and_single_stream_input(self_join):
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(4), self_join=self_join)
    empty = {"x": np.array([], dtype=float), "ts": np.array([], dtype=np.int64)}
    if not self_join:
        empty["stream"] = np.array([], dtype=np.int8)
    assert sj.run(q, empty).count == 0
    if not self_join:  # only R tuples: nothing to join
        only_r = {"stream": np.zeros(50, np.int8), "x": np.zeros(50)}
        assert sj.run(q, only_r).count == 0


def test_ordered_output_follows_later_tuple():
    q = sj.Query(sj.band("x", 3), window=sj.CountWindow(20))
    data = sj.sources.synthetic(500, low=0, high=40, seed=5)
    res = sj.run(q, data, batch_size=64, ordered=True)
    r = res.pairs.column("r").to_numpy()
    s = res.pairs.column("s").to_numpy()
    later, earlier = np.maximum(r, s), np.minimum(r, s)
    assert np.all(np.diff(later) >= 0)
    assert np.all((np.diff(later) > 0) | (np.diff(earlier) > 0))
    assert res.same_pairs(sj.oracle.join(q, data))


def test_larger_random_run_all_batch_sizes():
    q = sj.Query(sj.band("x", 2) & sj.less_equal("y"), window=sj.TimeWindow(40, 25))
    data = sj.sources.synthetic(
        3000, low=0, high=200, attrs=("x", "y"), rate=1000, rate_s=2500, process="poisson", seed=11
    )
    expected = sj.oracle.join(q, data)
    assert len(expected) > 100
    for batch_size in (1, 17, 256, 4096):
        assert sj.run(q, data, batch_size=batch_size).same_pairs(expected)
