"""The Ray executor's coalescing: held messages leave in order, merged only where the
receiver's answer cannot change, and every layout still gives the oracle's answer."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.router import Drain
from streamjoin.batch import Batch, PairBatch
from streamjoin.runtime.ray_executor import _merge, _Outbox

LAYOUTS = {
    "single": lambda: sj.topologies.single(),
    "split3": lambda: sj.topologies.split(3),
    "grid1x4": lambda: sj.topologies.grid(1, 4),
    "grid2x2": lambda: sj.topologies.grid(2, 2),
    "grid2x3_direct": lambda: sj.topologies.grid(2, 3, forward="direct"),
    "panjoin2x4": lambda: sj.topologies.panjoin(2, 4),
    "handshake3": lambda: sj.topologies.handshake(3, segment=2),
    "handshake3_ll": lambda: sj.topologies.handshake(3, low_latency=True),
}


def _batch(seq, stream, horizon=(0, 0), store=True) -> Batch:
    seq = np.asarray(seq, dtype=np.int64)
    z = np.zeros(len(seq), dtype=np.int64)
    return Batch(
        seq=seq, stream=np.asarray(stream, dtype=np.int8), idx=seq.copy(), ts=seq.copy(),
        ingest_ns=z.copy(), lo_idx=z.copy(), attrs=seq[None, :].astype(np.float64),
        horizon=np.asarray(horizon, dtype=np.int64), store=store,
    )  # fmt: skip


class _Recorder:
    """Stands in for a Ray actor handle: records what ``on_messages.remote`` was given."""

    def __init__(self) -> None:
        self.calls: list = []
        self.on_messages = self

    def remote(self, msgs):
        self.calls.append(msgs)
        return len(self.calls)


def _held(box: _Outbox) -> list:
    handle = box.handle
    box.submit()
    return handle.calls[-1]


def test_outbox_merges_consecutive_batches_of_one_port_only():
    box = _Outbox(_Recorder(), "join_core", max_tuples=5)
    msgs = [
        ("row", _batch([0, 1], [0, 0], (0, 0))),
        ("row", _batch([2], [0], (1, 0))),  # merged with the one before
        ("col", _batch([3], [1], (1, 1))),  # another port
        ("row", _batch([4], [0], (2, 1))),
        ("row", _batch([5], [0], (2, 1), store=False)),  # another store flag
        ("row", _batch([6, 7], [0, 0], (3, 1), store=False)),
        ("row", _batch([8, 9, 10], [0, 0, 0], (4, 1), store=False)),  # would exceed 5 tuples
        ("row", Drain()),
    ]
    for port, msg in msgs:
        box.hold(port, msg)
    assert box.n_held == len(msgs)
    sent = _held(box)
    assert [p for p, _ in sent] == ["row", "col", "row", "row", "row", "row"]
    assert [list(m.seq) for _, m in sent[:-1]] == [[0, 1, 2], [3], [4], [5, 6, 7], [8, 9, 10]]
    assert list(sent[0][1].horizon) == [1, 0]  # the later horizon
    assert [m.store for _, m in sent[:-1]] == [True, True, True, False, False]
    assert isinstance(sent[-1][1], Drain)
    assert box.held == [] and box.n_held == 0


def test_outbox_keeps_batches_apart_for_roles_that_count_them():
    for role in ("handshake_ll_core", "handshake_core", "worker", "collector"):
        box = _Outbox(_Recorder(), role, max_tuples=100)
        box.hold("r_in", _batch([0], [0]))
        box.hold("r_in", _batch([1], [0]))
        assert len(_held(box)) == 2


def test_outbox_merges_result_pairs():
    box = _Outbox(_Recorder(), "collector", max_tuples=1)
    for k in range(3):
        box.hold("in", PairBatch(np.array([k]), np.array([k + 10]), np.array([k])))
    ((port, pairs),) = _held(box)
    assert port == "in" and list(pairs.r) == [0, 1, 2] and list(pairs.s) == [10, 11, 12]


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_merged_batches_join_like_separate_ones(data):
    """A join core given two consecutive batches as one (DESIGN §2) finds the same pairs."""
    self_join = data.draw(st.booleans())
    table = data.draw(tables(self_join, max_rows=40))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    emitter = sj.runtime.build.build_actor(
        "emitter", {}, query, sj.runtime.build.Settings(batch_size=1), None
    )
    cols = sj.batch.validate(table, query)
    batches = [b for _, b in emitter.on_chunk(cols) + emitter.on_eof()]
    cut = sorted(data.draw(st.lists(st.integers(0, len(batches)), max_size=6)))
    core = JoinCore(query)
    found = []
    for a, b in zip([0, *cut], [*cut, len(batches)], strict=True):
        if b > a:
            found += [m for _, m in core.on_batch("in", _merge(batches[a:b]))]
    pairs = {(int(r), int(s)) for p in found for r, s in zip(p.r, p.s, strict=True)}
    assert pairs == set(zip(expected.column("r").to_pylist(), expected.column("s").to_pylist(),
                            strict=True))  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_ray_layout_equals_oracle_batch_one(ray_session, layout, data):
    topo = LAYOUTS[layout]()
    self_join = data.draw(st.booleans()) and topo.graph.graph["self_join"]
    table = data.draw(tables(self_join, max_rows=80))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    res = sj.run(query, table, topo, backend="ray", batch_size=1)
    assert res.same_pairs(sj.oracle.join(query, table)), layout


def test_ray_coalesces_a_fast_source(ray_session):
    """Batches of one tuple from a source far faster than a Ray call: the core receives fewer,
    larger batches, and the answer is the oracle's."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50, 30))
    data = sj.sources.synthetic(3000, low=0, high=300, seed=4)
    res = sj.run(q, data, sj.topologies.grid(2, 2), backend="ray", batch_size=1)
    assert res.same_pairs(sj.oracle.join(q, data))
    actors = res.metrics["actors"]
    sent = actors["emitter"]["batches_out"]
    received = sum(actors[f"core{j}_0"]["batches_in"] for j in (0, 1))
    assert sent == 3000 and received < sent


def _with_config(topo, node: str, **config):
    topo.graph.nodes[node]["config"] = {**topo.graph.nodes[node]["config"], **config}
    return topo


def test_ray_failure_downstream_of_a_busy_chain_names_the_actor(ray_session):
    """A core at the end of a grid row fails on its first batch while the cores before it
    hold messages for it: the run ends with the failing actor's error, no hang."""
    from streamjoin.runtime.ray_executor import ActorFailed

    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(2000, low=0, high=300, seed=5)
    topo = _with_config(sj.topologies.grid(2, 2), "core1_1", ports={"nowhere": (0, 1)})
    with pytest.raises(ActorFailed, match="actor 'core1_1' \\(join_core\\) failed: ValueError"):
        sj.run(q, data, topo, backend="ray", batch_size=1)


def test_ray_failure_of_one_core_of_a_split_ends_the_run(ray_session):
    from streamjoin.runtime.ray_executor import ActorFailed

    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(500, low=0, high=50, seed=6)
    topo = _with_config(sj.topologies.split(2), "core1", ports={"nowhere": (0, 1)})
    with pytest.raises(ActorFailed, match="actor 'core1' \\(join_core\\) failed: ValueError"):
        sj.run(q, data, topo, backend="ray", batch_size=4)
