"""The Ray executor's coalescing: waiting messages reach the logic in order, merged only where
the receiver's answer cannot change, and every layout still gives the oracle's answer."""

import dataclasses
import os
import re
import signal
import threading
import time

import numpy as np
import pytest
from budget import examples
from faults import PAUSE_S, host_pids, inject
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors.base import RunSettings
from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.handshake import HandshakeCore
from streamjoin.actors.handshake_ll import LowLatencyHandshakeCore
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.panjoin import PanJoinWorker
from streamjoin.actors.router import Drain
from streamjoin.batch import Batch, PairBatch
from streamjoin.runtime.coalesce import merge
from streamjoin.runtime.ray.inbox import EdgeEnded, Inbox, Message, Messages

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
        seq=seq,
        stream=np.asarray(stream, dtype=np.int8),
        idx=seq.copy(),
        ts=seq.copy(),
        ingest_ns=z.copy(),
        lo_idx=z.copy(),
        attrs=seq[None, :].astype(np.float64),
        horizon=np.asarray(horizon, dtype=np.int64),
        store=store,
    )


def _taken(box: Inbox) -> list:
    """Everything in ``box`` as ``(port, message)``, merged as the worker receives it."""
    out = []
    while box.items:
        item = box.take()
        out.append((item.port, merge(item.messages)) if isinstance(item, Messages) else item)
    return out


def test_inbox_merges_consecutive_batches_of_one_sender_and_port_only():
    box = Inbox(True, limit=None, max_tuples=5)
    msgs = [
        ("a", "row", _batch([0, 1], [0, 0], (0, 0))),
        ("a", "row", _batch([2], [0], (1, 0))),  # merged with the one before
        ("a", "col", _batch([3], [1], (1, 1))),  # another port
        ("a", "row", _batch([4], [0], (2, 1))),
        ("b", "row", _batch([5], [0], (2, 1))),  # another sender
        ("b", "row", _batch([6], [0], (2, 1), store=False)),  # another store flag
        ("b", "row", _batch([7, 8], [0, 0], (3, 1), store=False)),
        ("b", "row", _batch([9, 10, 11], [0, 0, 0], (4, 1), store=False)),  # over 5 tuples
        ("b", "row", Drain()),
    ]
    for sender, port, msg in msgs:
        box.put(Message(sender, port, msg))
    box.put(EdgeEnded("a"))
    got = _taken(box)
    assert [p for p, _ in got[:-1]] == ["row", "col", "row", "row", "row", "row", "row"]
    batches = [m for _, m in got[:-2]]
    assert [list(m.seq) for m in batches] == [[0, 1, 2], [3], [4], [5], [6, 7, 8], [9, 10, 11]]
    assert list(batches[0].horizon) == [1, 0]  # the later horizon
    assert [m.store for m in batches] == [True, True, True, True, False, False]
    assert isinstance(got[-2][1], Drain)
    assert got[-1] == EdgeEnded("a")


def test_inbox_keeps_batches_apart_for_logic_that_counts_them():
    for logic in (HandshakeCore, LowLatencyHandshakeCore, PanJoinWorker, Collector):
        assert not logic.merges_batches
        box = Inbox(logic.merges_batches, limit=None, max_tuples=100)
        box.put(Message("a", "r_in", _batch([0], [0])))
        box.put(Message("a", "r_in", _batch([1], [0])))
        assert len(_taken(box)) == 2


def test_inbox_merges_result_pairs():
    box = Inbox(False, limit=None, max_tuples=1)
    for k in range(3):
        box.put(Message("core", "in", PairBatch(np.array([k]), np.array([k + 10]), np.array([k]))))
    ((port, pairs),) = _taken(box)
    assert port == "in" and list(pairs.r) == [0, 1, 2] and list(pairs.s) == [10, 11, 12]


def test_full_inbox_pauses_its_reader_until_the_worker_takes():
    box = Inbox(False, limit=2, max_tuples=1)
    box.put(Message("a", "in", _batch([0], [0])))
    assert not box.pause()
    box.put(Message("b", "in", _batch([1], [0])))  # from a neighbour: counts the same
    box.put(EdgeEnded("a"))
    assert box.pause()  # the reader stops reading edges on no cycle
    box.wake_r.setblocking(False)
    with pytest.raises(BlockingIOError):
        box.wake_r.recv(8)  # nobody has woken it yet
    box.take()
    assert box.wake_r.recv(8) == b"x"  # room again: the reader is woken
    assert not box.pause()
    box.put(Message("a", "in", _batch([2], [0])))
    assert box.pause()
    box.take()
    box.take()
    assert not box.pause()


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_merged_batches_join_like_separate_ones(data):
    """A join core given two consecutive batches as one (docs/design.md §2) finds the same pairs."""
    self_join = data.draw(st.booleans())
    table = data.draw(tables(self_join, max_rows=40))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    emitter = EmitterConfig().build(query, RunSettings(batch_size=1), None)
    cols = sj.validation.validate(table, query)
    batches = [b for _, b in emitter.on_chunk(cols) + emitter.on_eof()]
    cut = sorted(data.draw(st.lists(st.integers(0, len(batches)), max_size=6)))
    core = JoinCore(query)
    found = []
    for a, b in zip([0, *cut], [*cut, len(batches)], strict=True):
        if b > a:
            found += [m for _, m in core.on_batch("in", merge(batches[a:b]))]
    pairs = {(int(r), int(s)) for p in found for r, s in zip(p.r, p.s, strict=True)}
    assert pairs == set(
        zip(expected.column("r").to_pylist(), expected.column("s").to_pylist(), strict=True)
    )


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_merged_copies_join_like_separate_ones_at_a_paired_core(data):
    """A self-join on a grid core: its R copies (port ``row``) and S copies (port ``col``)
    merged per port as an inbox merges them, in any order that keeps each port FIFO, give the
    oracle's pairs."""
    table = data.draw(tables(True, max_rows=40))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=True)
    config = sj.topologies.grid(1, 1).config("emitter")
    emitter = config.build(query, RunSettings(batch_size=1), None)
    sent = emitter.on_chunk(sj.validation.validate(table, query)) + emitter.on_eof()
    waiting = {port: [b for p, b in sent if p == f"{port}0"] for port in ("row", "col")}
    core = JoinCore(query, ports={"row": (0,), "col": (1,)}, paired=True)
    found = []
    while waiting["row"] or waiting["col"]:
        port = data.draw(st.sampled_from([p for p, q in waiting.items() if q]))
        take = data.draw(st.integers(1, len(waiting[port])))
        group, waiting[port] = waiting[port][:take], waiting[port][take:]
        found += [m for _, m in core.on_batch(port, merge(group))]
    pairs = sorted((int(r), int(s)) for p in found for r, s in zip(p.r, p.s, strict=True))
    expected = sj.oracle.join(query, table)
    assert pairs == sorted(
        zip(expected.column("r").to_pylist(), expected.column("s").to_pylist(), strict=True)
    )


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
    """Batches of one tuple arriving faster than a core joins them: the core receives fewer,
    larger batches, and the answer is the oracle's. The input comes as one chunk, so the
    emitter writes all its batches for a core at once, and the core pauses for half a second
    at its tenth tuple, so they wait in its socket together: whether any wait without the
    pause depends on the processes' timing (a busy CI machine once had none wait)."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50, 30))
    data = sj.sources.synthetic(3000, low=0, high=300, seed=4)
    topo = inject(sj.topologies.grid(2, 2), "core0_0", fault="pause", after=10)
    res = sj.run(q, data, topo, backend="ray", batch_size=1, chunk_rows=3000)
    assert res.same_pairs(sj.oracle.join(q, data))
    actors = res.metrics["actors"]
    sent = actors["emitter"]["batches_out"]
    received = sum(actors[f"core{j}_0"]["batches_in"] for j in (0, 1))
    assert sent == 3000 and received < sent
    # a step's wall time counts its sleep, its thread's CPU time does not
    paused, other = actors["core0_0"], actors["core1_1"]
    assert (
        paused["busy_s"] >= PAUSE_S and 0 < paused["step_cpu_s"] < paused["busy_s"] - 0.8 * PAUSE_S
    )
    assert 0 < other["step_cpu_s"] <= other["busy_s"] * 1.05 + 0.001


def _with_config(topo, node: str, **changes):
    """``topo`` with ``node``'s typed config changed (a fault injected into one actor)."""
    topo.graph.nodes[node]["config"] = dataclasses.replace(topo.config(node), **changes)
    return topo


def test_ray_failure_downstream_of_a_busy_chain_names_the_actor(ray_session):
    """A core at the end of a grid row fails on its first batch while the cores before it
    hold messages for it: the run ends with the failing actor's error, no hang."""
    from streamjoin.runtime.ray.executor import ActorFailed

    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(2000, low=0, high=300, seed=5)
    topo = _with_config(sj.topologies.grid(2, 2), "core1_1", ports={"nowhere": (0, 1)})
    with pytest.raises(ActorFailed, match="actor 'core1_1' \\(join_core\\) failed: ValueError"):
        sj.run(q, data, topo, backend="ray", batch_size=1)


def test_ray_failure_of_one_core_of_a_split_ends_the_run(ray_session):
    from streamjoin.runtime.ray.executor import ActorFailed

    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(500, low=0, high=50, seed=6)
    topo = _with_config(sj.topologies.split(2), "core1", ports={"nowhere": (0, 1)})
    with pytest.raises(ActorFailed, match="actor 'core1' \\(join_core\\) failed: ValueError"):
        sj.run(q, data, topo, backend="ray", batch_size=4)


def test_ray_actor_process_killed_mid_run_ends_the_run(ray_session):
    """An actor's process dies (SIGKILL) while batches flow: its sockets close, the run ends
    with an error naming a dead actor — in bounded time, never a hang or a short result."""
    from streamjoin.runtime.ray.executor import ActorFailed

    class Killing(sj.sources.Source):
        def __iter__(self):
            rng = np.random.default_rng(3)
            for k in range(400):
                if k == 5:
                    for pid in host_pids():
                        os.kill(pid, signal.SIGKILL)
                ts = np.arange(k * 50, (k + 1) * 50)
                yield {"stream": ts % 2, "ts": ts, "x": rng.uniform(0, 100, 50)}
                time.sleep(0.002)

    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(100))
    outcome = {}

    def run():
        try:
            outcome["result"] = sj.run(
                q, Killing(), sj.topologies.split(2), backend="ray", batch_size=50
            )
        except Exception as e:
            outcome["error"] = e

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(180)
    assert not runner.is_alive(), "the run hung after an actor's process died"
    assert isinstance(outcome.get("error"), ActorFailed), outcome
    assert re.search(r"actor '(core0|core1|collector)'.*died", str(outcome["error"]))
