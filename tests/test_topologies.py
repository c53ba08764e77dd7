"""Parallel layouts (split, DP-Join grid, PanJoin, handshake) give the oracle's answer on random
inputs, under FIFO delivery and under random interleavings that keep each link FIFO."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors.base import RunSettings
from streamjoin.actors.window_part import WindowPart

LAYOUTS = [
    lambda: sj.topologies.split(1),
    lambda: sj.topologies.split(3),
    lambda: sj.topologies.grid(1, 4),
    lambda: sj.topologies.grid(2, 2),
    lambda: sj.topologies.grid(4, 1),
    lambda: sj.topologies.grid(2, 3, forward="direct"),
    lambda: sj.topologies.panjoin(2, 4),
    lambda: sj.topologies.panjoin(3, 1, subwindow_size=5),
    lambda: sj.topologies.handshake(1),
    lambda: sj.topologies.handshake(3, segment=2),
    lambda: sj.topologies.handshake(3, low_latency=True),
]


@pytest.mark.parametrize("make", LAYOUTS)
@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_layout_equals_oracle(make, data):
    topo = make()
    self_join = data.draw(st.booleans()) and topo.graph.graph["self_join"]
    table = data.draw(tables(self_join, max_rows=80))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    for batch_size in (1, 3, 64):
        # FIFO delivery, then a random interleaving that keeps each link FIFO (as Ray does)
        for seed in (None, data.draw(st.integers(0, 2**16), label="delivery_seed")):
            res = sj.run(query, table, topo, batch_size=batch_size, delivery_seed=seed)
            assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}, seed {seed}"


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
    # every layout runs self-joins today; one that declares it cannot is refused up front
    assert all(make().graph.graph["self_join"] for make in LAYOUTS)
    topo = sj.topologies.grid(2, 2)
    topo.graph.graph["self_join"] = False
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(4), self_join=True)
    with pytest.raises(ValueError, match="two-way joins only"):
        sj.run(q, {"x": [1.0, 2.0]}, topo)


def test_panjoin_subwindows_and_the_index_subwindows_are_set_apart():
    """PanJoin's own subwindow size (a manager setting) and a subwindow index's option of the
    same name reach their own actors; naming an index option twice is an error."""
    topo = sj.topologies.panjoin(
        2, 4, "bisort", subwindow_size=50, index_options={"subwindow_size": 64}
    )
    manager = topo.config("manager")
    workers = [topo.config(n) for n in topo.nodes("worker")]
    assert manager.subwindow_size == 50
    assert all(w.index_options == {"subwindow_size": 64} for w in workers)
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(300))
    data = sj.sources.synthetic(3_000, low=0, high=2000, seed=2)
    res = sj.run(q, data, topo, batch_size=32)
    assert res.same_pairs(sj.oracle.join(q, data))
    built = workers[0].build(q, RunSettings(), None)
    part = WindowPart(built.spec)
    assert part.index.subwindow_size == 64
    with pytest.raises(ValueError, match=r"index option\(s\) \['subwindow_size'\] given twice"):
        sj.topologies.single("bisort", index_options={"subwindow_size": 8}, subwindow_size=16)


def test_panjoin_expires_whole_subwindows_and_spreads_them():
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(400))
    data = sj.sources.synthetic(20_000, low=0, high=5000, seed=3)
    res = sj.run(q, data, sj.topologies.panjoin(2, 4), batch_size=100)
    assert res.same_pairs(sj.oracle.join(q, data))
    workers = [a for a in res.metrics["actors"].values() if a["role"] == "worker"]
    assert len(workers) == 2 and all(w["batches_in"] > 0 for w in workers)


def test_panjoin_manager_commands():
    from streamjoin.actors.emitter import Emitter
    from streamjoin.actors.panjoin import PanJoinManager
    from streamjoin.validation import validate

    q = sj.Query(sj.equal("x"), window=sj.CountWindow(4))
    data = {"stream": [0] * 10 + [1], "x": [1.0] * 11}
    em = Emitter(q, batch_size=100)
    em.on_chunk(validate(data, q))
    ((_, batch),) = em.on_eof()
    manager = PanJoinManager(q, workers=2, subwindows=2)  # 2 tuples per subwindow
    out = dict(manager.on_batch("in", batch))
    # 10 R tuples fill 5 subwindows placed round robin from worker 0; S starts on worker 1;
    # after the batch only the R subwindows holding idx >= 10 - 4 = 6 stay live
    assert [c for c in out["w0"].create] == [0, 2, 4]
    assert [c for c in out["w1"].create] == [1, 3, 5]
    assert sorted(out["w0"].expire + out["w1"].expire) == [0, 1, 2]
    assert [s.id for s in manager.chains[0]] == [3, 4]


def test_handshake_moves_tuples_along_the_chain():
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(300))
    data = sj.sources.synthetic(6000, low=0, high=3000, seed=5)
    res = sj.run(q, data, sj.topologies.handshake(4), batch_size=50, delivery_seed=1)
    assert res.same_pairs(sj.oracle.join(q, data))
    actors = res.metrics["actors"]
    # the inner cores receive only what their neighbours forward
    assert actors["core1"]["tuples_in"] > 0 and actors["core2"]["tuples_in"] > 0
    assert sj.topologies.handshake(4).cyclic


def test_chain_cores_pass_batches_on_before_their_step():
    """A chain-forwarding grid core says what it passes on (``passes_on``, sent by every
    executor before ``on_batch``), and its step returns only pairs; a core without ``forward``
    (a direct grid's, a split's) and a logic without ``passes_on`` pass nothing on; an unknown
    port is refused by both calls."""
    from streamjoin.actors import passes_on
    from streamjoin.actors.emitter import Emitter
    from streamjoin.actors.join_core import JoinCore
    from streamjoin.topologies.grid import PASSED_ON, PORTS
    from streamjoin.validation import validate

    q = sj.Query(sj.equal("x"), window=sj.CountWindow(4))
    em = Emitter(q, batch_size=100)
    em.on_chunk(validate({"stream": [0, 1, 1], "x": [1.0, 1.0, 2.0]}, q))
    ((_, batch),) = em.on_eof()
    chained = JoinCore(q, ports=PORTS, forward=PASSED_ON)
    assert passes_on(chained, "row", batch) == [("row_next", batch)]
    out = chained.on_batch("row", batch)
    assert [p for p, _ in out] == ["out"] and len(out[0][1]) == 1  # r0 with s1, once
    assert passes_on(JoinCore(q, ports=PORTS), "row", batch) == []
    assert passes_on(sj.actors.Collector(), "in", batch) == []  # no passes_on: nothing
    for call in (chained.passes_on, chained.on_batch):
        with pytest.raises(ValueError, match="no input port 'up'"):
            call("up", batch)
    with pytest.raises(ValueError, match="passes on ports \\['up'\\] it does not take"):
        JoinCore(q, ports=PORTS, forward={"up": "up_next"})


# -- self-joins on layouts that route R and S apart ---------------------------------------------

SELF_JOIN_LAYOUTS = [
    lambda: sj.topologies.grid(1, 1),
    lambda: sj.topologies.grid(2, 2),
    lambda: sj.topologies.grid(2, 3, forward="direct"),
    lambda: sj.topologies.handshake(1),
    lambda: sj.topologies.handshake(3, segment=2),
    lambda: sj.topologies.handshake(1, low_latency=True),
    lambda: sj.topologies.handshake(3, low_latency=True),
]

_N = 40
EDGE_CASES = {
    "empty": ({"x": np.zeros(0)}, sj.CountWindow(5)),
    "one_tuple": ({"x": np.ones(1)}, sj.CountWindow(5)),
    "window_of_one": ({"x": np.arange(_N) % 3.0}, sj.CountWindow(1)),
    "all_keys_equal": ({"x": np.ones(_N)}, sj.CountWindow(7)),
    "equal_timestamps": (
        {"ts": np.zeros(_N, np.int64), "x": np.arange(_N) % 4.0},
        sj.TimeWindow(1),
    ),
    "time_window_steps": ({"ts": np.arange(_N) // 5, "x": np.ones(_N)}, sj.TimeWindow(1)),
}


@pytest.mark.parametrize("make", SELF_JOIN_LAYOUTS)
@pytest.mark.parametrize("case", list(EDGE_CASES))
@pytest.mark.parametrize("predicate", [sj.band("x", 1), sj.band("x", lo=-1, hi=3)])
def test_self_join_edge_cases(make, case, predicate):
    data, window = EDGE_CASES[case]
    q = sj.Query(predicate, window=window, self_join=True)
    expected = sj.oracle.join(q, data)
    topo = make()
    for batch_size, seed in ((1, None), (1, 2), (4, 3), (64, None)):
        res = sj.run(q, data, topo, batch_size=batch_size, delivery_seed=seed)
        assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}, seed {seed}"


def test_paired_route_sends_every_batch_as_r_and_as_s():
    from streamjoin.actors.emitter import Emitter
    from streamjoin.actors.router import HandshakeRoute
    from streamjoin.validation import validate

    q = sj.Query(sj.equal("x"), window=sj.CountWindow(2), self_join=True)
    route = sj.topologies.grid(2, 3).config("emitter").route
    em = Emitter(q, batch_size=2, route=route)
    sent = em.on_chunk(validate({"x": np.ones(6)}, q))
    # rows and columns round robin, each batch once to each
    assert [p for p, _ in sent] == ["row0", "col0", "row1", "col1", "row0", "col2"]
    for (_, r_copy), (_, s_copy) in zip(sent[::2], sent[1::2], strict=True):
        assert (r_copy.stream == 0).all() and (s_copy.stream == 1).all()
        for f in ("seq", "idx", "lo_idx"):  # one numbering: rank in the one stream
            assert np.array_equal(getattr(r_copy, f), getattr(s_copy, f))
        assert r_copy.horizon[1] == r_copy.horizon[0] and list(s_copy.horizon) == list(
            r_copy.horizon
        )
    assert list(sent[-1][1].horizon) == [4, 4]  # 6 tuples, window 2
    # without "paired" (the low-latency chain) a self-join goes in at one end only
    ll = Emitter(q, 6, route=HandshakeRoute(paired=False))
    assert [p for p, _ in ll.on_chunk(validate({"x": np.ones(6)}, q))] == ["row0"]
    assert [p for p, _ in ll.on_eof()] == ["row0"]


def test_paired_core_keeps_each_pair_once_where_the_older_r_copy_meets():
    """One grid core, one batch of three equal keys: its S copy arrives first and is stored;
    the R copy then finds each pair (older R, newer S) once, and neither a tuple with itself
    nor a pair the other way round."""
    from streamjoin.actors.emitter import Emitter
    from streamjoin.actors.join_core import JoinCore
    from streamjoin.actors.router import GridRoute
    from streamjoin.validation import validate

    q = sj.Query(sj.less_equal("x"), window=sj.CountWindow(5), self_join=True)
    em = Emitter(q, batch_size=3, route=GridRoute(1, 1))
    (_, r_copy), (_, s_copy) = em.on_chunk(validate({"x": [2.0, 1.0, 1.0]}, q))
    core = JoinCore(q, ports={"row": (0,), "col": (1,)}, paired=True)
    assert core.on_batch("col", s_copy) == []  # stored; no in-batch join of one copy
    ((_, pairs),) = core.on_batch("row", r_copy)
    # θ(a, b) or θ(b, a) for every pair of equal or unequal keys: all three, r the older
    assert sorted(zip(pairs.r.tolist(), pairs.s.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 2)]
    with pytest.raises(ValueError, match="R and S copies on different ports"):
        JoinCore(q, paired=True)


def test_an_unknown_index_option_is_named_before_anything_runs():
    """A mistyped option fails when the topology is built (index named) or checked (index
    chosen from the predicate), naming the option and the ones the index takes."""
    import pytest

    with pytest.raises(ValueError, match="index 'pim_tree' has no option 'bogus'; its options: "):
        sj.topologies.single("pim_tree", index_options={"bogus": 1})
    with pytest.raises(ValueError, match="has no option 'leafsize'.*leaf_size"):
        sj.topologies.grid(2, 2, "bplus_tree", leafsize=8)
    query = sj.Query(sj.band("x", 1), window=sj.CountWindow(10))
    topo = sj.topologies.split(2, index_options={"partition": 4})  # index chosen at run time
    with pytest.raises(ValueError, match="index 'bisort' has no option 'partition'"):
        sj.run(query, sj.sources.synthetic(100, seed=1), topo)
    # the options an index does take still build and run
    res = sj.run(query, sj.sources.synthetic(500, seed=2), sj.topologies.single(partitions=8))
    assert res.same_pairs(sj.oracle.join(query, sj.sources.synthetic(500, seed=2)))
