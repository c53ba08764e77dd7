"""The low-latency handshake join gives the oracle's answer on every backend and under every
per-link FIFO interleaving, finds crossing pairs once, and beats the original on latency."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.handshake_ll import LowLatencyHandshakeCore
from streamjoin.actors.router import HandshakeRoute
from streamjoin.runtime import sim
from streamjoin.validation import validate


def ll(n: int, index: str | None = None) -> sj.topologies.Topology:
    return sj.topologies.handshake(n, index, low_latency=True)


def synthetic(n: int = 600, seed: int = 5):
    return sj.sources.synthetic(n, low=0, high=n // 2, seed=seed)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "window", [sj.CountWindow(120, 40), sj.TimeWindow(60)], ids=["count", "time"]
)
def test_chain_equals_oracle(n, window):
    q = sj.Query(sj.band("x", 2), window=window)
    data = synthetic()
    expected = sj.oracle.join(q, data)
    assert len(expected) > 100
    for batch_size in (1, 7, 64):
        for seed in (None, batch_size):  # FIFO, then a random interleaving keeping links FIFO
            res = sj.run(q, data, ll(n), batch_size=batch_size, delivery_seed=seed)
            assert res.same_pairs(expected), f"n={n}, batch {batch_size}, seed {seed}"


def test_duplicate_keys_and_equal_timestamps():
    rng = np.random.default_rng(3)
    rows = 400
    data = {
        "stream": rng.integers(0, 2, rows),
        "ts": np.repeat(np.arange(rows // 8), 8),
        "x": rng.integers(0, 3, rows).astype(float),
        "y": np.zeros(rows),
    }
    for q in (
        sj.Query(sj.equal("x") & sj.less_equal("y"), window=sj.TimeWindow(3, 5)),
        sj.Query(sj.band("x", lo=0, hi=1), window=sj.CountWindow(25)),
    ):
        expected = sj.oracle.join(q, data)
        assert len(expected) > 1000
        for batch_size, seed in ((1, 4), (8, None), (8, 5), (1000, 6)):
            res = sj.run(q, data, ll(3), batch_size=batch_size, delivery_seed=seed)
            assert res.same_pairs(expected), f"{q}, batch {batch_size}, seed {seed}"


@pytest.mark.parametrize(
    "data",
    [
        {"stream": np.zeros(0, np.int8), "x": np.zeros(0)},
        {"stream": np.zeros(30, np.int8), "x": np.ones(30)},  # S never arrives
        {"stream": np.r_[np.ones(20, np.int8), np.zeros(20, np.int8)], "x": np.ones(40)},
    ],
    ids=["empty", "only_r", "all_s_then_all_r"],
)
def test_empty_and_one_sided_streams(data):
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(8))
    expected = sj.oracle.join(q, data)
    for seed in (None, 3):
        res = sj.run(q, data, ll(3), batch_size=3, delivery_seed=seed)
        assert res.same_pairs(expected)


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_random_inputs_and_interleavings(data):
    self_join = data.draw(st.booleans(), label="self_join")
    table = data.draw(tables(self_join, max_rows=80))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    n = data.draw(st.integers(1, 4), label="cores")
    batch_size = data.draw(st.sampled_from([1, 2, 5, 64]), label="batch_size")
    seed = data.draw(st.none() | st.integers(0, 2**16), label="delivery_seed")
    res = sj.run(query, table, ll(n), batch_size=batch_size, delivery_seed=seed)
    assert res.same_pairs(sj.oracle.join(query, table))


# -- crossing by hand ----------------------------------------------------------------------------


def _two_core_chain():
    """Core 0 and core 1 of a chain, and the two batches the emitter sends for the input
    (s0, r1), equal keys: s0 goes to core 1 (its home), r1 to core 0 (its home)."""
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(4))
    em = Emitter(q, batch_size=1, route=HandshakeRoute())
    sent = em.on_chunk(validate({"stream": [1, 0], "x": [1.0, 1.0]}, q))
    assert [p for p, _ in sent] == ["col0", "row0"]
    (_, s0), (_, r1) = sent
    cores = [LowLatencyHandshakeCore(q, k, 2) for k in (0, 1)]
    return cores, s0, r1


def _pairs(out):
    return [(int(r), int(s)) for p, m in out if p == "out" for r, s in zip(m.r, m.s, strict=True)]


def test_a_later_tuple_that_overtakes_is_found_by_the_crossing_log():
    cores, s0, r1 = _two_core_chain()
    # r1 passes core 1 before s0 reaches it: they cross, and s0 meets r1 at s0's home
    assert cores[0].passes_on("r_in", r1) == [("r_out", r1)]  # on, before core 0's step
    assert cores[0].on_batch("r_in", r1) == []  # stored at core 0, nothing there to meet yet
    assert cores[1].passes_on("r_in", r1) == []  # the end of the chain for R
    assert _pairs(cores[1].on_batch("r_in", r1)) == []
    tuples = cores[1].work.tuples
    out = cores[1].on_batch("s_in", s0)
    assert _pairs(out) == [(1, 0)] and cores[1].stats["crossed"] == 1
    # what the simulator charges: s0, s0 and the log concatenated (each tuple copied, then
    # sorted or dropped), and the two joined as a batch
    assert cores[1].work.tuples - tuples == 1 + 2 + 2
    # core 0 stores r1, but r1 is later than s0: found already, not again
    assert _pairs(cores[0].on_batch("s_in", s0)) == []


def test_without_a_crossing_the_later_tuple_finds_the_stored_one():
    cores, s0, r1 = _two_core_chain()
    assert _pairs(cores[1].on_batch("s_in", s0)) == []
    assert _pairs(cores[0].on_batch("s_in", s0)) == []  # s0 passes before r1 is stored
    cores[0].on_batch("r_in", r1)
    assert _pairs(cores[1].on_batch("r_in", r1)) == [(1, 0)]
    assert cores[1].stats["crossed"] == 0


@pytest.mark.parametrize("self_join", [False, True])
def test_each_tuple_is_stored_once_and_state_is_bounded(self_join):
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(200), self_join=self_join)
    data = sj.sources.synthetic(4000, low=0, high=2000, self_join=self_join, seed=5)
    emitter = Emitter(q, batch_size=10, route=HandshakeRoute(paired=False))
    cores = [LowLatencyHandshakeCore(q, k, 4) for k in range(4)]
    batches = [(p, b) for p, b in emitter.on_chunk(validate(data, q))]
    if self_join:  # one stream: in at one end
        assert all(p == "row0" for p, _ in batches)
    for port, batch in batches:  # FIFO: each batch through the whole chain, then the next
        x = 0 if port == "row0" else 1
        for core in cores if x == 0 else cores[::-1]:
            core.on_batch("rs"[x] + "_in", batch)
    inserted = [c.stats["inserted"] for c in cores]
    assert sum(inserted) == len(data) and min(inserted) > 0.2 * len(data)
    for core in cores:
        for y, part in core.parts.items():
            assert len(part) <= 200 // 4 + 2 * 10  # a quarter of the window, and a batch
            assert sum(map(len, core.crossed[y])) <= 10  # FIFO: no tuple is overtaken


def test_a_self_join_meets_at_the_older_tuples_home():
    """One stream, two cores, batches of two: the first batch's pairs come from its in-batch
    join at its home (core 0), the second batch finds the first's tuples stored at core 0 and
    its own at core 1; nothing is found twice, and a self-join core has no S port."""
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(4), self_join=True)
    em = Emitter(q, batch_size=2, route=HandshakeRoute(paired=False))
    (_, b0), (_, b1) = em.on_chunk(validate({"x": [1.0, 1.0, 1.0, 1.0]}, q))
    cores = [LowLatencyHandshakeCore(q, k, 2) for k in (0, 1)]
    assert _pairs(cores[0].on_batch("r_in", b0)) == [(0, 1)]  # at home: the batch itself
    assert _pairs(cores[1].on_batch("r_in", b0)) == []  # passing: nothing stored yet
    assert sorted(_pairs(cores[0].on_batch("r_in", b1))) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert _pairs(cores[1].on_batch("r_in", b1)) == [(2, 3)]
    assert [c.stats["inserted"] for c in cores] == [2, 2]
    with pytest.raises(ValueError, match="no input port 's_in'"):
        cores[0].on_batch("s_in", b0)


# -- the topology, other backends ----------------------------------------------------------------


def test_topology_and_spec(tmp_path):
    topo = sj.topologies.parse("handshake:3:ll", "bplus_tree")
    assert topo.name == "handshake(3, low_latency)" and topo.cyclic
    assert set(topo.nodes()) - {"emitter", "collector"} == set(topo.nodes("handshake_ll_core"))
    assert [topo.graph.nodes[f"core{k}"]["pos"] for k in range(3)] == [(0, 0), (1, 0), (2, 0)]
    assert sj.topologies.parse("handshake:3").nodes("handshake_core")
    with pytest.raises(ValueError, match="segment applies to the original"):
        sj.topologies.handshake(3, segment=4, low_latency=True)
    topo.draw(tmp_path / "chain.png")
    assert (tmp_path / "chain.png").stat().st_size > 0


def test_sim_is_exact_and_faster_than_the_original():
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(300))
    data = synthetic(3000)
    expected = sj.oracle.join(q, data)
    runs = {}
    for name, topo in (("original", sj.topologies.handshake(4)), ("ll", ll(4))):
        runs[name] = res = sj.run(
            q,
            data,
            topo,
            batch_size=16,
            max_delay=0.001,
            backend="sim",
            arrival=sim.Arrival.constant(20_000),
        )
        assert res.same_pairs(expected), name
    assert runs["ll"].metrics["latency_ms"]["p50"] < runs["original"].metrics["latency_ms"]["p50"]
