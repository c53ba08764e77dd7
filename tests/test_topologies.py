"""Parallel layouts (split, DP-Join grid) give the oracle's answer on random inputs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj

LAYOUTS = [
    lambda: sj.topologies.split(1),
    lambda: sj.topologies.split(3),
    lambda: sj.topologies.grid(1, 4),
    lambda: sj.topologies.grid(2, 2),
    lambda: sj.topologies.grid(4, 1),
    lambda: sj.topologies.grid(2, 3, forward="direct"),
]


@pytest.mark.parametrize("make", LAYOUTS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_layout_equals_oracle(make, data):
    topo = make()
    self_join = data.draw(st.booleans()) and topo.graph.graph["self_join"]
    table = data.draw(tables(self_join, max_rows=80))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    for batch_size in (1, 3, 64):
        res = sj.run(query, table, topo, batch_size=batch_size)
        assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}"


def test_every_core_does_its_share():
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(500))
    data = sj.sources.synthetic(20_000, low=0, high=5000, seed=3)
    res = sj.run(q, data, sj.topologies.grid(2, 2), batch_size=256)
    cores = {k: v for k, v in res.metrics["actors"].items() if v["role"] == "join_core"}
    assert len(cores) == 4
    # every core sees its row's R and its column's S: about half of the input each
    for stats in cores.values():
        assert stats["tuples_in"] == pytest.approx(10_000, rel=0.1)
    assert res.same_pairs(sj.oracle.join(q, data))


def test_layout_errors():
    with pytest.raises(ValueError, match="m must be a positive integer, got 0"):
        sj.topologies.grid(0, 2)
    with pytest.raises(ValueError, match="forward must be 'chain' or 'direct'"):
        sj.topologies.grid(2, 2, forward="ring")
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(4), self_join=True)
    with pytest.raises(ValueError, match="two-way joins only"):
        sj.run(q, {"x": [1.0, 2.0]}, sj.topologies.grid(2, 2))
