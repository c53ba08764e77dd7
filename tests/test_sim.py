"""The ``sim`` backend: exact results under a virtual clock, a cost model that adds up, and
determinism."""

import dataclasses
import importlib
import math
import os
import warnings

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import LAYOUTS as EVERY_LAYOUT
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors import passes_on
from streamjoin.actors.base import RunSettings
from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.handshake import HandshakeCore
from streamjoin.actors.handshake_ll import LowLatencyHandshakeCore
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.join_spec import JOIN_COUNTERS
from streamjoin.actors.panjoin import PanJoinManager, PanJoinWorker
from streamjoin.runtime import sim
from streamjoin.runtime.coalesce import INBOX

LAYOUTS = [
    lambda: sj.topologies.single(),
    lambda: sj.topologies.split(3),
    lambda: sj.topologies.grid(2, 2),
    lambda: sj.topologies.grid(1, 4, forward="direct"),
    lambda: sj.topologies.panjoin(2, 4),
    lambda: sj.topologies.handshake(3, segment=2),
]

ARRIVALS = st.sampled_from(
    [
        sim.Arrival.replay(),
        sim.Arrival.constant(5_000),
        sim.Arrival.poisson(rate_r=2_000, rate_s=6_000, seed=3),
    ]
)


@pytest.mark.parametrize("make", LAYOUTS)
@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_sim_equals_oracle(make, data):
    topo = make()
    self_join = data.draw(st.booleans()) and topo.graph.graph["self_join"]
    table = data.draw(tables(self_join, max_rows=70))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    arrival = data.draw(ARRIVALS)
    max_delay = data.draw(st.sampled_from([None, 0.0, 0.002]))
    expected = sj.oracle.join(query, table)
    for batch_size in (1, 3, 64):
        res = sj.run(
            query,
            table,
            topo,
            batch_size=batch_size,
            backend="sim",
            arrival=arrival,
            max_delay=max_delay,
        )
        assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}, {arrival}"
        assert res.metrics["backend"] == "sim"
        assert np.all(res.pairs.column("latency_ns").to_numpy() >= 0)


# -- the virtual clock ---------------------------------------------------------------------------

RATE = 50.0  # tuples/s: far below what one core sustains under a calibrated profile (Ray: ~300)
N = 160


def _profile():
    """The shipped profile with byte-independent message costs and no after-idle costs
    (simpler expectations)."""
    p = sim.default_profile().with_after_idle(sim.IdleCosts())
    return p.with_messages(
        dataclasses.replace(
            p.messages, send_per_byte_ns=0.0, hop_per_byte_ns=0.0, recv_per_byte_ns=0.0, measured=()
        )
    )


def _chain_input(n: int = N):
    """R, S, R, S, … all with x = 0: under a count window of 1 every tuple joins exactly its
    predecessor, so each step's counters are known in advance."""
    return {"stream": np.arange(n) % 2, "x": np.zeros(n)}


QUERY = sj.Query(sj.band("x", 0), window=sj.CountWindow(1))


def _cost(coefs: dict, **counts) -> float:
    return sum(coefs[f] * counts.get(f, 0) for f in coefs)


def _join(p, batch: int) -> float:
    """The core's steady-state step on a batch of the chain input: each part holds one tuple;
    every tuple probes it (one candidate each), the batch stores its tuples and expires as
    many; each tuple joins its predecessor."""
    return _cost(
        p.indexes["nested_loop"],
        calls=1,
        part_calls=4 if batch > 1 else 2,
        tuples=batch,
        probes=batch,
        scan=batch,
        candidates=batch,
        pairs=batch,
        inserted=batch,
        expired=batch,
    )


def _service(p, batch: int) -> float:
    """Emitter step that closes a batch (merged from ``batch`` one-tuple chunks), the core's
    steady-state step on it, and the two messages (emitter → core → collector, each received
    before the step that reads it), in ns."""
    m, em = p.messages, p.roles["emitter"]
    emitter = _cost(
        em, calls=1, tuples_in=1, msgs_out=1, tuples_out=batch, copied=batch if batch > 1 else 0
    )
    hop = m.send_ns + m.hop_ns
    return emitter + hop + m.recv_ns + _join(p, batch) + hop + m.recv_ns


def _run(batch: int, rate: float = RATE, **kw):
    return sj.run(
        QUERY,
        _chain_input(kw.pop("n", N)),
        sj.topologies.single("nested_loop"),
        batch_size=batch,
        chunk_rows=1,
        backend="sim",
        machine=kw.pop("machine", _profile()),
        arrival=sim.Arrival.constant(rate),
        **kw,
    )


def test_latency_is_service_time_at_low_rate():
    p = _profile()
    res = _run(1)
    lat = res.pairs.column("latency_ns").to_numpy()
    assert len(lat) == N - 1
    assert np.median(lat[4:]) == pytest.approx(_service(p, 1), rel=1e-6)
    assert res.metrics["input_tuples_per_s"] == pytest.approx(RATE, rel=0.02)
    assert res.metrics["machine_profile"]["name"] == p.name
    core = res.metrics["actors"]["core"]
    assert core["peak_queue"] == 1 and core["busy_share"] < 0.5
    # its steps' compute is its busy time less what its messages cost it
    messaging = core["batches_in"] * p.messages.recv_ns + core["batches_out"] * p.messages.send_ns
    assert core["step_cpu_s"] * 1e9 == pytest.approx(core["busy_s"] * 1e9 - messaging, rel=1e-6)
    assert core["step_cpu_s"] * 1e9 >= (N - 5) * _join(p, 1) and messaging > 0


def test_each_actors_steps_say_when_they_began_and_ended_after_the_tuples_arrival():
    """At a low rate each batch goes alone along the path: the emitter's step begins as its
    chunk arrives and ends after its charge, the core's begins once the batch is sent, on
    the wire and received, and lasts its join; the collector's begins at the latency its
    pairs are stamped with."""
    p = _profile()
    m, em = p.messages, p.roles["emitter"]
    res = _run(1)
    lags = {a: v["lag_ms"] for a, v in res.metrics["actors"].items()}
    emitter = _cost(em, calls=1, tuples_in=1, msgs_out=1, tuples_out=1)
    assert lags["emitter"]["start_p50"] == 0
    assert lags["emitter"]["end_p50"] * 1e6 == pytest.approx(emitter, abs=1)
    core_start = emitter + m.send_ns + m.hop_ns + m.recv_ns
    assert lags["core"]["start_p50"] * 1e6 == pytest.approx(core_start, abs=1)
    assert lags["core"]["end_p50"] * 1e6 == pytest.approx(core_start + _join(p, 1), abs=1)
    assert lags["core"]["cpu_p50"] * 1e6 == pytest.approx(_join(p, 1), abs=1)
    assert lags["core"]["step_p50"] * 1e6 == pytest.approx(_join(p, 1), abs=1)
    latency = np.median(res.pairs.column("latency_ns").to_numpy()[4:])
    assert lags["collector"]["start_p50"] * 1e6 == pytest.approx(latency, abs=1)
    assert lags["collector"]["steps"] == res.metrics["actors"]["collector"]["batches_in"]


def test_a_core_woken_from_rest_pays_the_wake_up():
    """At a low rate every message finds its receiver resting: each costs the core and the
    collector ``wake_ns`` more, on their busy time and on every pair's latency, and every
    chunk the emitter (after it stamped the chunk, as the driver does); fed back to back (all
    input at once) only the first message wakes anyone."""
    p = _profile()
    awake = p.with_messages(dataclasses.replace(p.messages, wake_ns=40_000.0))
    base, woken = _run(1), _run(1, machine=awake)
    for actor in ("core", "collector"):
        a, b = base.metrics["actors"][actor], woken.metrics["actors"][actor]
        assert b["busy_s"] - a["busy_s"] == pytest.approx(a["batches_in"] * 40e-6, rel=1e-6)
        assert b["step_cpu_s"] == pytest.approx(a["step_cpu_s"], rel=1e-9)  # not compute
    a, b = base.metrics["actors"]["emitter"], woken.metrics["actors"]["emitter"]
    assert b["busy_s"] - a["busy_s"] == pytest.approx(N * 40e-6, rel=1e-6)  # a chunk a tuple
    lat0, lat1 = base.latency_ns(), woken.latency_ns()
    np.testing.assert_allclose(lat1 - lat0, 120_000, atol=2)
    flood = {m: _run(1, rate=1e12, machine=m).metrics["actors"]["core"] for m in (p, awake)}
    assert flood[awake]["busy_s"] - flood[p]["busy_s"] == pytest.approx(40e-6, rel=1e-3)


def test_a_wake_up_costs_more_the_longer_the_core_slept():
    """``wake_after`` points: linear from nothing at a gap of 0, the last one's beyond; a
    core that slept ``gap`` pays ``wake_ns`` and that more on the message that woke it."""
    wake = ((1e6, 10_000.0), (1e7, 50_000.0))
    m = dataclasses.replace(_profile().messages, wake_ns=1_000.0, wake_after=wake)
    assert m.wake_cost(0) == 0 and m.wake_cost(5e5) == pytest.approx(1_000 + 5_000)
    assert m.wake_cost(5.5e6) == pytest.approx(1_000 + 30_000)
    assert m.wake_cost(1e9) == m.wake_cost(1e7) == pytest.approx(51_000)
    assert sim.MessageCosts(**m.to_dict()) == m
    assert m.scaled(2).wake_after == ((1e6, 5_000.0), (1e7, 25_000.0))
    with pytest.raises(ValueError, match="wake_after"):
        dataclasses.replace(m, wake_after=((1e7, 1.0), (1e6, 2.0)))
    # every message of a slow stream finds the core and the collector asleep for longer
    # than the last point: each pays its whole cost
    p = _profile()
    slept = p.with_messages(dataclasses.replace(p.messages, wake_after=wake))
    base, woken = _run(1, rate=50.0), _run(1, rate=50.0, machine=slept)
    for actor in ("core", "collector"):
        a, b = base.metrics["actors"][actor], woken.metrics["actors"][actor]
        assert b["busy_s"] - a["busy_s"] == pytest.approx(a["batches_in"] * 50e-6, rel=1e-6)


def test_the_source_pays_the_drivers_wake_not_a_receivers():
    """``driver_wake_after`` points are what the source pays after resting between the
    chunks of a paced stream (its timer woke it, not a frame); the receivers keep paying
    ``wake_after``; a profile without them charges the source a receiver's wake."""
    wake, driver = ((1e6, 10_000.0), (1e7, 50_000.0)), ((1e6, 2_000.0), (1e7, 8_000.0))
    m = dataclasses.replace(_profile().messages, wake_after=wake, driver_wake_after=driver)
    assert m.driver_wake_cost(0) == 0 and m.driver_wake_cost(5.5e6) == pytest.approx(5_000)
    assert m.driver_wake_cost(1e9) == pytest.approx(8_000)
    assert dataclasses.replace(m, driver_wake_after=()).driver_wake_cost(1e9) == m.wake_cost(1e9)
    assert sim.MessageCosts(**m.to_dict()) == m
    assert m.scaled(2).driver_wake_after == ((1e6, 1_000.0), (1e7, 4_000.0))
    with pytest.raises(ValueError, match="driver_wake_after"):
        dataclasses.replace(m, driver_wake_after=((1e6, -1.0),))
    p = _profile()
    slept = p.with_messages(dataclasses.replace(p.messages, wake_after=wake))
    both = p.with_messages(m)
    runs = [_run(1, rate=50.0, machine=x).metrics["actors"] for x in (p, slept, both)]
    chunks = runs[0]["emitter"]["batches_out"]
    emitter = [r["emitter"]["busy_s"] for r in runs]
    assert emitter[1] - emitter[0] == pytest.approx(chunks * 50e-6, rel=1e-6)
    assert emitter[2] - emitter[0] == pytest.approx(chunks * 8e-6, rel=1e-6)
    assert runs[2]["core"]["busy_s"] == pytest.approx(runs[1]["core"]["busy_s"], rel=1e-9)


def _split_slowly(machine) -> dict:
    """The actors' metrics of split(2) fed a tuple every 20 ms: every message finds its
    receiver resting."""
    res = sj.run(
        QUERY,
        _chain_input(N),
        sj.topologies.split(2, "nested_loop"),
        batch_size=1,
        chunk_rows=1,
        backend="sim",
        machine=machine,
        arrival=sim.Arrival.constant(50.0),
    )
    return res.metrics["actors"]


def test_a_message_to_a_core_asleep_costs_its_sender_the_rouse():
    """``rouse_after`` points as ``wake_after``'s; a sender pays them, by how long the
    receiver slept, for each message that finds it asleep with nothing on its way, after the
    message left: at a low rate every message; fed back to back, about none."""
    rouse = ((1e6, 10_000.0), (1e7, 50_000.0))
    m = dataclasses.replace(_profile().messages, rouse_after=rouse)
    assert m.rouse_cost(0) == 0 and m.rouse_cost(5.5e6) == pytest.approx(30_000)
    assert m.rouse_cost(1e9) == m.rouse_cost(1e7) == pytest.approx(50_000)
    assert dataclasses.replace(m, rouse_after=()).rouse_cost(1e9) == 0
    assert sim.MessageCosts(**m.to_dict()) == m
    assert m.scaled(2).rouse_after == ((1e6, 5_000.0), (1e7, 25_000.0))
    with pytest.raises(ValueError, match="rouse_after"):
        dataclasses.replace(m, rouse_after=((1e6, -1.0),))
    p = _profile()
    roused = p.with_messages(m)
    base, more = _run(1, rate=50.0), _run(1, rate=50.0, machine=roused)
    for actor in ("emitter", "core"):  # each message to the core, each pairs to the collector
        a, b = base.metrics["actors"][actor], more.metrics["actors"][actor]
        assert a["batches_out"] > 10
        assert b["busy_s"] - a["busy_s"] == pytest.approx(a["batches_out"] * 50e-6, rel=1e-6)
    a = base.metrics["actors"]["collector"]
    assert more.metrics["actors"]["collector"]["busy_s"] == pytest.approx(a["busy_s"])
    # the sender pays after the message left (the receiver wakes while the sender is still
    # in the write): a chain of one receiver each is no later
    np.testing.assert_allclose(more.latency_ns(), base.latency_ns(), atol=2)
    flood = [_run(1, rate=1e12, machine=x).metrics["actors"]["emitter"] for x in (p, roused)]
    assert flood[1]["busy_s"] - flood[0]["busy_s"] <= 50e-6 * 2
    # a sender's next message leaves after the rouse of the one before
    begins = []
    for machine in (p, roused):
        actors = _split_slowly(machine)
        begins.append([actors[c]["lag_ms"]["start_p50"] for c in ("core0", "core1")])
    assert begins[1][0] == pytest.approx(begins[0][0], abs=1e-6)
    assert begins[1][1] - begins[0][1] == pytest.approx(0.05, abs=1e-6)


def test_on_shared_processors_a_write_rouses_as_many_receivers_as_processors_idle():
    """The rouse is the sender's cost of waking an idle processor for a resting receiver:
    with a processor per core the emitter of split(2) pays it for both cores each chunk; on
    two shared processors, one of them its own, for the first core only (the kernel queues
    the second on a busy processor)."""
    p = _profile()
    roused = p.with_messages(
        dataclasses.replace(p.messages, rouse_after=((1e6, 50_000.0), (1e7, 50_000.0)))
    )
    extra = {}
    for cpus in (None, 2, 3):
        busy = []
        for machine in (p, roused):
            machine = machine if cpus is None else machine.with_cpus(cpus)
            busy.append(_split_slowly(machine)["emitter"])
        extra[cpus] = (busy[1]["busy_s"] - busy[0]["busy_s"]) / busy[0]["batches_out"] * 2
    # (batches_out counts each message: two a chunk)
    assert extra[None] == pytest.approx(100e-6, rel=1e-3)  # both cores, each chunk
    assert extra[2] == pytest.approx(50e-6, rel=1e-3)  # one processor idle: one core
    assert extra[3] == pytest.approx(100e-6, rel=1e-3)  # two idle: both


def test_a_cyclic_graphs_receives_pay_the_hand_over():
    """Every receive in a cyclic graph (a handshake chain, whose hosts read in a thread of
    their own) costs ``cyclic_recv_ns`` more; an acyclic layout's do not."""
    p = _profile()
    handed = p.with_messages(dataclasses.replace(p.messages, cyclic_recv_ns=30_000.0))
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(64))
    data = sj.sources.synthetic(3_000, low=0, high=3_000, seed=5)
    kw = {"backend": "sim", "batch_size": 32, "arrival": sim.Arrival.constant(20_000.0)}
    for topo, extra in ((sj.topologies.handshake(2), 30e-6), (sj.topologies.single(), 0.0)):
        base = sj.run(q, data, topo, machine=p, **kw).metrics["actors"]
        more = sj.run(q, data, topo, machine=handed, **kw).metrics["actors"]
        for actor, a in base.items():
            if actor == "emitter":
                continue
            got = more[actor]["busy_s"] - a["busy_s"]
            assert got == pytest.approx(a["batches_in"] * extra, abs=1e-9), (topo.name, actor)


def test_latency_adds_batching_delay():
    p = _profile()
    batch = 4
    res = _run(batch)
    r, s, lat = (res.pairs.column(c).to_numpy() for c in ("r", "s", "latency_ns"))
    later = np.maximum(r, s)
    steady = later >= 2 * batch
    # the later tuple waits for the rest of its batch to arrive, one every 1/RATE s
    waiting = (batch - 1 - later % batch) / RATE * 1e9
    expected = waiting + _service(p, batch)
    np.testing.assert_allclose(lat[steady], expected[steady], rtol=1e-6)


def test_max_delay_closes_batches_on_the_virtual_clock():
    res = _run(64, max_delay=0.004)  # 4 ms: a batch closes with about one tuple in it
    lat = res.pairs.column("latency_ns").to_numpy()
    wait = 0.004 * 1e9
    assert wait < np.median(lat) < wait + 2 * _service(_profile(), 1)


def _capacity(p) -> float:
    """Tuples/s of the slowest actor at batch size 1, one tuple per chunk. Saturated, the core
    and the collector find messages waiting and take ``INBOX`` of them as one step (the
    ``ray`` executor's coalescing), each message's receive charged."""
    em, m, k = p.roles["emitter"], p.messages, INBOX
    per_tuple = {  # ns each actor is busy per input tuple, its sends included
        "emitter": _cost(em, calls=1, tuples_in=1, msgs_out=1, tuples_out=1) + m.send_ns,
        "core": (_join(p, k) + k * m.recv_ns + m.send_ns) / k,
        "collector": (_cost(p.roles["collector"], calls=1, pairs=k) + k * m.recv_ns) / k,
    }
    return 1e9 / max(per_tuple.values())


def test_queues_grow_above_capacity():
    p = _profile()
    capacity = _capacity(p)
    res = _run(1, rate=5 * capacity, n=400)
    lat = res.pairs.column("latency_ns").to_numpy()
    assert np.median(lat[-40:]) > 5 * np.median(lat[:40])
    busiest = max(res.metrics["actors"].values(), key=lambda a: a["busy_share"])
    assert busiest["peak_queue"] > 100 and busiest["busy_share"] > 0.95
    # saturated: the output keeps pace with the bottleneck, not with the input
    assert res.metrics["input_tuples_per_s"] == pytest.approx(capacity, rel=0.03)
    assert res.metrics["sim"]["drain_s"] > 0.5 * res.metrics["sim"]["last_arrival_s"]
    # while input arrives, the bottleneck's mailbox keeps growing
    samples = res.metrics["sim"]["queue_tuples"]
    arriving = np.array(samples["t_s"]) <= res.metrics["sim"]["last_arrival_s"]
    queued = np.array(samples["core"])[arriving]
    assert queued[len(queued) // 2 :].mean() > queued[: len(queued) // 2].mean() > 10


def test_max_sustainable_rate_finds_the_bottleneck():
    p = _profile()
    capacity = _capacity(p)
    found = sim.max_sustainable_rate(
        QUERY,
        _chain_input(600),
        sj.topologies.single("nested_loop"),
        machine=p,
        batch_size=1,
        chunk_rows=1,
        rel_tol=0.02,
    )
    assert found.rate == pytest.approx(capacity, rel=0.08)
    assert any(not r["sustainable"] for r in found.runs)


def test_profile_scaling_and_json(tmp_path):
    p = _profile()
    fast = p.scaled(cpu=2.0)
    assert fast.indexes["nested_loop"]["calls"] == p.indexes["nested_loop"]["calls"] / 2
    assert fast.messages == p.messages and fast.cpu_scale == 2.0
    path = tmp_path / "machine.json"
    fast.save(path)
    again = sim.MachineProfile.load(path)
    assert again.to_dict() == fast.to_dict()
    slow, quick = _run(1, machine=p, n=40), _run(1, machine=again, n=40)
    assert quick.metrics["machine_profile"]["cpu_scale"] == 2.0
    core = "core"
    assert quick.metrics["actors"][core]["busy_s"] < slow.metrics["actors"][core]["busy_s"]
    with pytest.raises(ValueError, match="unknown join cost feature"):
        sim.MachineProfile.from_dict({"indexes": {"hash": {"probs": 1.0}}})
    with pytest.raises(ValueError, match="cpu must be a positive factor"):
        p.scaled(cpu=0)


def test_measured_message_costs_are_interpolated(tmp_path):
    line = sim.MessageCosts(
        send_ns=1_000.0, send_per_byte_ns=1.0, recv_ns=2_000.0, recv_per_byte_ns=2.0, hop_ns=500.0
    )
    m = dataclasses.replace(line, measured=[[100, 3_000, 5_000], [1_100, 4_000, 9_000]])
    assert line.send_recv(600) == (1_600.0, 3_200.0)  # the lines
    assert m.send_recv(10) == (3_000.0, 5_000.0)  # below the smallest: its costs
    assert m.send_recv(600) == (3_500.0, 7_000.0)  # halfway between the two
    assert m.send_recv(2_100) == (5_000.0, 11_000.0)  # beyond: the lines' per-byte costs
    assert m.scaled(2.0).send_recv(600) == (1_750.0, 3_500.0)
    # the simulator charges a message by its size
    p = _profile().with_messages(m)
    batch = _batch_of(8)
    nbytes = sim.message_nbytes(batch)
    send, recv = m.send_recv(nbytes)
    assert sim.CostModel(p).message_ns(batch) == (round(send), 500, round(recv))
    p.save(tmp_path / "m.json")
    assert sim.MachineProfile.load(tmp_path / "m.json").messages == m
    for bad in ([[100, 1, 1], [50, 1, 1]], [[100, -1, 1]], [[100, 1]]):
        with pytest.raises(ValueError, match="measured"):
            sim.MessageCosts(measured=bad)
    with pytest.raises(ValueError, match="bad 'messages'"):
        sim.MachineProfile.from_dict({"messages": {"measured": [[1, 2, 3], [1, 2, 3]]}})


def _batch_of(n: int):
    from streamjoin.actors.emitter import Emitter
    from streamjoin.validation import validate

    emitter = Emitter(QUERY, batch_size=n)
    ((_, batch),) = emitter.on_chunk(validate(_chain_input(n), QUERY))
    return batch


IDLE = sim.IdleCosts(
    emitter_ns=30_000.0, join_ns=500_000.0, manager_ns=70_000.0, collector_ns=20_000.0
)


def test_after_idle_is_charged_when_the_core_was_idle():
    """At a low rate every step follows idle time: the emitter's and the core's after-idle
    costs add to the latency (the collector stamps a pair before its own compute)."""
    p = _profile().with_after_idle(IDLE)
    res = _run(1, machine=p)
    lat = res.pairs.column("latency_ns").to_numpy()
    expected = _service(p, 1) + IDLE.emitter_ns + IDLE.join_ns
    assert np.median(lat[4:]) == pytest.approx(expected, rel=1e-6)
    actors = res.metrics["actors"]
    assert actors["emitter"]["after_idle_steps"] >= N  # one chunk of one row at a time
    for name in ("core", "collector"):  # every batch (and end of stream)
        assert actors[name]["after_idle_steps"] >= actors[name]["batches_in"] > 0
    base = _run(1)
    busy = IDLE.join_ns * actors["core"]["after_idle_steps"] / 1e9
    assert actors["core"]["busy_s"] == pytest.approx(
        base.metrics["actors"]["core"]["busy_s"] + busy
    )


def test_after_idle_is_not_charged_when_busy():
    """Saturated, the bottleneck always finds a message waiting: no after-idle cost, so the
    capacity is that of the back-to-back steps."""
    p = _profile()
    capacity = _capacity(p)
    res = _run(1, rate=5 * capacity, n=400, machine=p.with_after_idle(IDLE))
    core = res.metrics["actors"]["core"]
    assert core["after_idle_steps"] <= 2  # the first step, at most one more at the start
    assert res.metrics["input_tuples_per_s"] == pytest.approx(capacity, rel=0.03)
    # with no after-idle costs nothing is counted
    assert _run(1, machine=p, n=20).metrics["actors"]["core"]["after_idle_steps"] == 0


def test_after_idle_is_charged_after_waiting_for_a_processor():
    """On shared processors a step that waited for one starts as cold as after idle time
    (other processes ran on it); with a processor each the same flood charges nothing but
    the first steps."""
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(50))
    data = sj.sources.synthetic(1_500, low=0, high=1_000, seed=5)
    flood = sim.Arrival.constant(1e9)
    p = _profile().with_after_idle(IDLE)

    def cores(prof):
        res = sj.run(
            query,
            data,
            sj.topologies.split(3),
            batch_size=16,
            chunk_rows=16,
            backend="sim",
            arrival=flood,
            machine=prof,
        )
        assert res.same_pairs(sj.oracle.join(query, data))
        return {n: a for n, a in res.metrics["actors"].items() if n.startswith("core")}

    own, shared = cores(p), cores(p.with_cpus(1))
    assert all(a["after_idle_steps"] <= 2 for a in own.values())
    assert all(a["after_idle_steps"] > a["batches_in"] / 2 for a in shared.values())


def test_after_idle_ramp_charges_by_the_gap():
    """The share of the after-idle cost grows with the gap (linear between the measured
    points, from nothing at 0, the last share beyond them); the simulator charges a step by
    the gap before it: a ramp reached after 1 ns charges what no ramp does, one reached only
    after a day charges next to nothing at this run's millisecond gaps."""
    ramp = sim.IdleCosts(join_ns=1.0, ramp=((1e6, 0.5), (5e6, 1.0)))
    assert [ramp.share(g) for g in (0, 5e5, 1e6, 3e6, 5e6, 1e9, math.inf)] == [
        0.0,
        0.25,
        0.5,
        0.75,
        1.0,
        1.0,
        1.0,
    ]
    assert sim.IdleCosts(join_ns=1.0).share(1.0) == 1.0  # no ramp: all of it
    for bad in (((0.0, 0.5),), ((2e6, 0.5), (1e6, 1.0)), ((1e6, -0.1),)):
        with pytest.raises(ValueError, match="ramp must be"):
            sim.IdleCosts(ramp=bad)

    def latency(idle):
        res = _run(1, machine=_profile().with_after_idle(idle))
        return np.median(res.pairs.column("latency_ns").to_numpy()[4:])

    p = _profile()
    full = _service(p, 1) + IDLE.emitter_ns + IDLE.join_ns
    assert latency(dataclasses.replace(IDLE, ramp=((1.0, 1.0),))) == pytest.approx(full, 1e-6)
    assert latency(dataclasses.replace(IDLE, ramp=((86_400e9, 1.0),))) == pytest.approx(
        _service(p, 1), rel=1e-3
    )


def test_after_idle_and_cpu_share_in_json_and_scaling(tmp_path):
    idle = dataclasses.replace(IDLE, ramp=((2e5, 0.3), (5e6, 1.0)))
    p = _profile().with_after_idle(idle).with_cpus(2, (0.9, 0.45))
    path = tmp_path / "machine.json"
    p.save(path)
    again = sim.MachineProfile.load(path)
    assert again.after_idle == idle and again.cpu_share == (0.9, 0.45) and again.cpus == 2
    assert again.to_dict() == p.to_dict()
    fast = again.scaled(cpu=2.0)
    assert fast.after_idle.join_ns == IDLE.join_ns / 2
    assert fast.after_idle.emitter_ns == IDLE.emitter_ns / 2
    assert fast.after_idle.ramp == idle.ramp  # gaps are idle time, not work
    assert fast.cpu_share == p.cpu_share  # the host's sharing, not its speed
    assert "after idle" in again.summary() and "0.45" in again.summary()
    # an older profile without them: no after-idle cost, no stretch
    old = {k: v for k, v in p.to_dict().items() if k not in ("after_idle", "cpu_share")}
    older = sim.MachineProfile.from_dict(old)
    assert older.after_idle == sim.IdleCosts() and older.cpu_share == ()
    with pytest.raises(ValueError, match="bad 'after_idle'"):
        sim.MachineProfile.from_dict({"after_idle": {"join": 1.0}})
    with pytest.raises(ValueError, match="cpu_share must hold shares"):
        _profile().with_cpus(2, (1.0, 0.0))


def test_cpu_share_stretches_concurrent_steps():
    """With other work on the host, steps that run at once share less: the compute of a step
    that starts while k steps hold processors is stretched by share[0] / share[k - 1]."""
    p = _profile().with_cpus(2, (0.8, 0.4))
    assert [p.slowdown(k) for k in (1, 2, 3)] == [1.0, 2.0, 2.0]
    assert _profile().with_cpus(None, (0.8, 0.4)).slowdown(2) == 1.0  # a processor each
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(50))
    data = sj.sources.synthetic(1_500, low=0, high=1_000, seed=5)
    flood = sim.Arrival.constant(1e9)

    def run(prof):
        return sj.run(
            query,
            data,
            sj.topologies.split(3),
            batch_size=16,
            chunk_rows=16,
            backend="sim",
            arrival=flood,
            machine=prof,
        )

    whole, even, shared = (run(_profile().with_cpus(2, s)) for s in ((), (0.7, 0.7), (0.8, 0.4)))
    assert shared.same_pairs(sj.oracle.join(query, data))
    assert even.metrics["input_tuples_per_s"] == whole.metrics["input_tuples_per_s"]
    assert shared.metrics["input_tuples_per_s"] < 0.8 * whole.metrics["input_tuples_per_s"]
    # a lone step is not stretched: at a low rate the latency is unchanged
    lone = _run(1, n=20, machine=_profile().with_cpus(2, (0.8, 0.4)))
    ref = _run(1, n=20, machine=_profile().with_cpus(2))
    np.testing.assert_array_equal(lone.latency_ns(), ref.latency_ns())


@pytest.mark.parametrize(
    "make", [lambda: sj.topologies.split(3), lambda: sj.topologies.handshake(3, segment=4)]
)
def test_shared_processors(make):
    """With ``cpus`` the cores take turns: still exact, never more busy than the processors
    allow, and slower than with a processor each."""
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(50))
    data = sj.sources.synthetic(1_500, low=0, high=1_000, seed=5)
    flood = sim.Arrival.constant(1e9)  # everything at once: the cores compete

    def busy(res):
        return sum(a["busy_share"] for a in res.metrics["actors"].values())

    own = sj.run(
        query,
        data,
        make(),
        batch_size=16,
        chunk_rows=16,
        backend="sim",
        arrival=flood,
        machine=_profile(),
    )
    shared = sj.run(
        query,
        data,
        make(),
        batch_size=16,
        chunk_rows=16,
        backend="sim",
        arrival=flood,
        machine=_profile().with_cpus(1),
    )
    assert shared.same_pairs(sj.oracle.join(query, data))
    assert busy(own) > 1.2 and busy(shared) <= 1.0 + 1e-9
    assert shared.metrics["input_tuples_per_s"] < own.metrics["input_tuples_per_s"]
    assert shared.metrics["machine_profile"]["cpus"] == 1
    with pytest.raises(ValueError, match="cpus must be a positive integer"):
        _profile().with_cpus(0)


SHARED_LAYOUTS = [
    *LAYOUTS,
    lambda: sj.topologies.shared_index(2, task_size=8, pipelined=False, step_tuples=0),
    lambda: sj.topologies.shared_index(2, task_size=8, pipelined=True),
    lambda: sj.topologies.handshake(2, low_latency=True),
]


@pytest.mark.parametrize("make", SHARED_LAYOUTS)
@settings(max_examples=examples(10), deadline=None)
@given(data=st.data())
def test_processor_sharing_equals_oracle(make, data):
    """Under processor sharing (every runnable step runs, its messages leaving as its work
    reaches them) every layout stays exact, on one processor, a few, and more than it has
    threads (a pipelined core's pool then takes its own)."""
    topo = make()
    self_join = data.draw(st.booleans()) and topo.graph.graph["self_join"]
    table = data.draw(tables(self_join, max_rows=60))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    cpus = data.draw(st.sampled_from([1, 2, 3, 6]))
    machine = sim.default_profile().with_cpus(cpus, sharing="ps")
    expected = sj.oracle.join(query, table)
    for batch_size in (1, 16):
        res = sj.run(
            query,
            table,
            topo,
            batch_size=batch_size,
            backend="sim",
            arrival=data.draw(ARRIVALS),
            machine=machine,
        )
        assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}, {cpus} processors"
        assert np.all(res.pairs.column("latency_ns").to_numpy() >= 0)


@pytest.mark.parametrize("cpus", [1, 2, 6])
def test_processor_sharing_passes_progress_markers_exactly(cpus):
    """A full outer join's progress markers (:mod:`streamjoin.runtime.markers`) under
    processor sharing: each layout's rows without a partner leave exactly once."""
    data = sj.sources.synthetic(3_000, low=0, high=6_000, attrs=("x",), seed=3)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(100), how="full")
    expected = sj.oracle.join(query, data)
    machine = sim.default_profile().with_cpus(cpus, sharing="ps")
    for topo in (
        sj.topologies.grid(2, 2),
        sj.topologies.handshake(2),
        sj.topologies.shared_index(2, pipelined=True),
    ):
        assert topo.marks_progress(query)
        res = sj.run(query, data, topo, backend="sim", machine=machine, pace=10_000, batch_size=16)
        assert res.same_pairs(expected), (topo.name, cpus)


def test_processor_sharing_runs_the_steps_one_message_wakes_together():
    """split(2) on one processor, a tuple every 20 ms: the emitter's message wakes both
    cores. First come, first served, the second core's step begins once the first's has
    ended; under processor sharing both run at once at half speed, the first ends later
    than it would alone and the last at the same instant (the same work on one processor),
    and each step's work is what it was."""
    fcfs, ps = (_split_slowly(_profile().with_cpus(1, sharing=s)) for s in ("fcfs", "ps"))
    again = _split_slowly(_profile().with_cpus(1, sharing="ps"))
    for name, actor in ps.items():  # deterministic
        assert (actor["busy_s"], actor.get("lag_ms")) == (
            again[name]["busy_s"],
            again[name].get("lag_ms"),
        )

    def lag(actors, core, what):
        return actors[core]["lag_ms"][what]

    assert lag(fcfs, "core1", "start_p50") >= lag(fcfs, "core0", "end_p50")
    assert lag(ps, "core1", "start_p50") < lag(ps, "core0", "end_p50")
    assert lag(ps, "core0", "end_p50") > lag(fcfs, "core0", "end_p50") + 0.03
    assert lag(ps, "core1", "end_p50") == pytest.approx(lag(fcfs, "core1", "end_p50"), abs=1e-5)
    for core in ("core0", "core1"):
        assert lag(ps, core, "cpu_p50") == pytest.approx(lag(fcfs, core, "cpu_p50"), rel=1e-6)
        assert lag(ps, core, "step_p50") > 1.5 * lag(ps, core, "cpu_p50")  # at half speed
    # with a processor each nothing is shared: the policy changes nothing
    own = [_split_slowly(dataclasses.replace(_profile(), sharing=s)) for s in ("fcfs", "ps")]
    for name, actor in own[0].items():
        assert (actor["busy_s"], actor.get("lag_ms")) == (
            own[1][name]["busy_s"],
            own[1][name].get("lag_ms"),
        )


def _flooded_split_on_one_processor(n: int, sharing: str, after_idle=None):
    """split(2) flooded with ``n`` tuples on one processor shared as ``sharing``, priced
    without wake-ups (and with ``after_idle``, if given): its result, checked exact."""
    p = _profile()
    p = p.with_messages(dataclasses.replace(p.messages, wake_ns=0.0, wake_after=(), rouse_after=()))
    if after_idle is not None:
        p = p.with_after_idle(after_idle)
    query = sj.Query(sj.band("x", 5), window=sj.CountWindow(2048))
    data = sj.sources.synthetic(n, low=0, high=n * 5 // 2, seed=3)
    res = sj.run(
        query,
        data,
        sj.topologies.split(2),
        batch_size=256,
        chunk_rows=256,
        backend="sim",
        arrival=sim.Arrival.constant(1e12),
        machine=p.with_cpus(1, sharing=sharing),
    )
    assert res.same_pairs(sj.oracle.join(query, data))
    return res


def test_processor_sharing_does_the_same_work_on_one_processor():
    """Flooded on one processor, with neither policy charging more for a wait (no after-idle
    or wake-up costs), both do the same steps one processor's work apart: the same
    throughput, within rounding, and the compute fits in the run's time. The emitter's
    links fill, so senders stall and go on as their receivers take messages (a step staged
    while another is)."""
    from streamjoin.runtime.coalesce import EDGE_BUFFER_BYTES

    runs = {}
    for sharing in ("fcfs", "ps"):
        res = _flooded_split_on_one_processor(24_000, sharing)
        actors = res.metrics["actors"]
        compute = sum(a["step_cpu_s"] for a in actors.values())
        assert compute <= res.metrics["elapsed_s"] * (1 + 1e-9)
        assert actors["emitter"]["peak_queue"] > 10  # its links were full: it stalled
        runs[sharing] = res.metrics["input_tuples_per_s"]
    assert runs["ps"] == pytest.approx(runs["fcfs"], rel=5e-3)
    assert INBOX + 2 * EDGE_BUFFER_BYTES // (256 * 41) < 24_000 / 256


def test_processor_sharing_charges_the_time_a_step_lacked_a_processor_as_a_wait():
    """A step that ran slower than alone for lack of a processor pays, at its end, the
    after-idle cost of that time as a step that waited for a processor does first come,
    first served (beyond what its rest before cost): flooded on one processor, the cores'
    steps, of which only the first followed a rest, are charged many steps' worth of it; at
    a low rate, where every step follows a long rest and pays all of it already, nothing
    more (the same charge under both policies)."""
    idle = dataclasses.replace(IDLE, ramp=((1e6, 1.0),))  # all of it after 1 ms
    cores = {}
    for charged in (None, idle):
        res = _flooded_split_on_one_processor(12_000, "ps", charged)
        cores[charged is None] = res.metrics["actors"]["core0"]
    assert cores[False]["after_idle_steps"] == 1  # only its first step followed a rest
    more = cores[False]["step_cpu_s"] - cores[True]["step_cpu_s"]
    assert more > 15 * IDLE.join_ns * 1e-9
    fcfs, ps = (
        _split_slowly(_profile().with_after_idle(IDLE).with_cpus(1, sharing=s))
        for s in ("fcfs", "ps")
    )
    for core in ("core0", "core1"):
        assert ps[core]["lag_ms"]["cpu_p50"] == pytest.approx(fcfs[core]["lag_ms"]["cpu_p50"])
        assert ps[core]["step_cpu_s"] == pytest.approx(fcfs[core]["step_cpu_s"], rel=1e-6)


def test_sharing_is_checked_and_kept_in_json(tmp_path):
    p = _profile().with_cpus(2, sharing="ps")
    assert p.sharing == "ps" and p.with_cpus(3).sharing == "ps"
    p.save(tmp_path / "p.json")
    assert sim.MachineProfile.load(tmp_path / "p.json").sharing == "ps"
    assert "processor sharing" in p.summary()
    assert sim.MachineProfile.from_dict({"name": "x"}).sharing == "fcfs"  # older profiles
    with pytest.raises(ValueError, match="sharing must be one of"):
        p.with_cpus(2, sharing="round robin")


@pytest.mark.parametrize("make", LAYOUTS)
@pytest.mark.parametrize("batch_size", [1, 5])
def test_waiting_batches_are_coalesced(make, batch_size):
    """Under a flood, batches of one sender for one port that wait together reach the logic
    as one (the ``ray`` executor's inbox): at most ``INBOX`` at a time, still exact."""
    topo = make()
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(40))
    data = sj.sources.synthetic(600, low=0, high=1_000, seed=7)
    res = sj.run(
        query,
        data,
        topo,
        batch_size=batch_size,
        chunk_rows=batch_size,
        backend="sim",
        arrival=sim.Arrival.constant(1e9),
    )
    assert res.same_pairs(sj.oracle.join(query, data))
    actors = res.metrics["actors"]
    steps = sum(a["batches_in"] for a in actors.values())  # one per message or merged group
    delivered = res.metrics["sim"]["messages"]
    assert delivered / INBOX <= steps <= delivered
    if "core" in actors:  # single: the core is the bottleneck and merges, two at a time
        sent = actors["emitter"]["batches_out"]
        assert sent / INBOX <= actors["core"]["batches_in"] < sent


def test_a_merge_costs_its_receiver_the_copy():
    """Batches that reach a core as one cost it the merge (``MessageCosts.merge_cost`` of the
    merged message) besides each frame's receive; a lone batch costs none."""
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(40))
    data = sj.sources.synthetic(600, low=0, high=1_000, seed=7)
    base = _profile()

    def core(merge_ns: float, per_byte: float) -> dict:
        costs = dataclasses.replace(base.messages, merge_ns=merge_ns, merge_per_byte_ns=per_byte)
        res = sj.run(
            query,
            data,
            sj.topologies.single(),
            batch_size=20,
            chunk_rows=20,
            backend="sim",
            arrival=sim.Arrival.constant(1e12),
            machine=base.with_messages(costs),
        )
        assert res.same_pairs(sj.oracle.join(query, data))
        assert res.metrics["actors"]["emitter"]["batches_out"] == 30  # 600 tuples
        return res.metrics["actors"]["core"]

    plain, fixed, by_byte = core(0.0, 0.0), core(50_000.0, 0.0), core(0.0, 2.0)
    merged = 30 - plain["batches_in"]  # each merged step took two batches of 20
    assert merged > 0 and fixed["batches_in"] == by_byte["batches_in"] == plain["batches_in"]
    assert fixed["busy_s"] - plain["busy_s"] == pytest.approx(merged * 50_000e-9, rel=1e-9)
    # per byte: each merged message's bytes (40 tuples; a band join's batches carry two
    # attribute rows)
    nbytes = (by_byte["busy_s"] - plain["busy_s"]) * 1e9 / (2.0 * merged)
    assert nbytes == pytest.approx(sim.message_nbytes(_batch_of(40)))


def test_cli_cpus_option():
    import argparse

    from streamjoin import cli_sim

    args = argparse.Namespace(backend="sim", machine=None, arrival=None, pace=None, seed=1, cpus=2)
    assert cli_sim.sim_run_kwargs(args)["machine"].cpus == 2
    args.sharing = "ps"
    machine = cli_sim.sim_run_kwargs(args)["machine"]
    assert (machine.cpus, machine.sharing) == (2, "ps")
    args.cpus = None
    with pytest.raises(ValueError, match="--sharing needs --cpus"):
        cli_sim.sim_run_kwargs(args)
    args.backend = "local"
    with pytest.raises(ValueError, match="need --backend sim"):
        cli_sim.sim_run_kwargs(args)


LOGIC = [Emitter, JoinCore, PanJoinManager, PanJoinWorker, HandshakeCore, LowLatencyHandshakeCore]


@pytest.mark.parametrize("logic", [*LOGIC, Collector], ids=lambda c: c.__name__)
def test_every_logic_counts_what_its_cost_group_charges(logic):
    """One charging path for every role: a logic's counters are its group's features after
    the call, so a profile's coefficients line up with them by name."""
    assert sim.FEATURES[logic.cost_group] == ("calls", *logic.COUNTERS)


def _drive(topo, query, data, batch_size):
    """Every node's logic, driven by hand as the ``local`` executor drives it (FIFO, what a
    node passes on before its step), and the result pairs."""
    logics = {
        n: topo.config(n).build(query, RunSettings(batch_size=batch_size), None) for n in topo.graph
    }
    routes = topo.routes()
    queue, pairs = [], 0

    def send(src, out):
        for port, msg in out:
            queue.extend((dst, p, msg) for dst, p in routes.get((src, port), ()))

    send(topo.emitter, logics[topo.emitter].on_chunk(sj.validation.validate(data, query), 0))
    send(topo.emitter, logics[topo.emitter].on_eof())
    for node in topo.eof_order():
        while queue:
            dst, port, msg = queue.pop(0)
            if dst == topo.collector:
                pairs += len(msg)
                continue
            send(dst, passes_on(logics[dst], port, msg))
            send(dst, logics[dst].on_batch(port, msg))
        if node != topo.emitter:
            send(node, logics[node].on_eof())
    return logics, pairs


@pytest.mark.parametrize(
    ("make", "stored"),
    [
        (lambda: sj.topologies.single("bplus_tree"), lambda n_r, n_s: n_r + n_s),
        (lambda: sj.topologies.split(3, "hash"), lambda n_r, n_s: n_r + n_s),
        (lambda: sj.topologies.grid(2, 3, "nested_loop"), lambda n_r, n_s: 3 * n_r + 2 * n_s),
        (lambda: sj.topologies.panjoin(2, 3, "bisort"), lambda n_r, n_s: n_r + n_s),
        (lambda: sj.topologies.handshake(2, low_latency=True), lambda n_r, n_s: n_r + n_s),
    ],
)
@pytest.mark.parametrize("batch_size", [1, 16])
def test_join_counters_account_for_the_work(make, stored, batch_size):
    """The counters the simulator charges, against what the run did: every pair counted
    once, every stored tuple counted as inserted once, no more expired than inserted, tuples
    handled as routed, a probe's scan only where it probed, candidates for every pair an
    index found; and the charge of a step is the
    dot product of the coefficients with the counters' differences."""
    query = sj.Query(sj.equal("x") & sj.band("y", 50), window=sj.CountWindow(60))
    data = sj.sources.synthetic(900, low=0, high=40, attrs=("x", "y"), seed=5)
    n_s = int(np.count_nonzero(data.column("stream").to_numpy()))
    n_r = 900 - n_s
    topo = make()
    logics, pairs = _drive(topo, query, data, batch_size)
    assert pairs == len(sj.oracle.join(query, data))
    total = {name: 0 for name in JOIN_COUNTERS}
    for logic in logics.values():
        if logic.cost_group == "join":
            for name, v in zip(JOIN_COUNTERS, logic.counters(), strict=True):
                total[name] += v
    manager_pairs = sum(lg.counters()[2] for lg in logics.values() if lg.cost_group == "manager")
    assert total["pairs"] + manager_pairs == pairs
    assert total["inserted"] == stored(n_r, n_s)
    assert total["expired"] <= total["inserted"]
    # PanJoin drops whole subwindows (a part call each): its workers count no expired tuple
    assert (total["expired"] > 0) == ("panjoin" not in topo.name)
    assert total["pairs"] > 0 and total["candidates"] > 0
    if batch_size == 1:  # no pair comes from a batch's join with itself: all from candidates
        assert total["candidates"] >= total["pairs"]
    core = next(lg for lg in logics.values() if lg.cost_group == "join")
    assert total["probes"] > 0
    assert (total["scan"] > 0) == (core.spec.index_cls.probe_cost != "const")  # hash: O(1)
    assert total["part_calls"] > 0 and total["tuples"] >= n_r + n_s
    emitter = logics[topo.emitter]
    assert emitter.counters()[0] == 900  # tuples in

    model = sim.CostModel(_profile())
    c_call, *per_unit = model.coefficients(core)
    before, after = tuple(0 for _ in core.counters()), core.counters()
    expected = c_call + sum(c * (a - b) for c, a, b in zip(per_unit, after, before, strict=True))
    assert model.bind(core)("batch", None, before, after, 0) == pytest.approx(expected)
    assert expected > c_call


def test_message_sizes():
    """The simulator sizes messages without summing their arrays; the sizes must agree."""
    query = sj.Query(sj.band("x", 3) & sj.band("y", 2), window=sj.CountWindow(20))
    data = sj.sources.handshake_workload(200, rate=1_000, seed=1)
    from streamjoin.actors.emitter import Emitter
    from streamjoin.validation import validate

    emitter = Emitter(query, batch_size=16, clock=lambda: 0)
    batches = [m for _, m in emitter.on_chunk(validate(data, query))]
    assert batches
    for b in batches:
        assert sim.message_nbytes(b) == b.nbytes
    pairs = sj.batch.PairBatch.empty()
    assert sim.message_nbytes(pairs) == 0
    z = np.arange(5, dtype=np.int64)
    assert sim.message_nbytes(sj.batch.PairBatch(z, z, z)) == 3 * z.nbytes


# -- determinism ---------------------------------------------------------------------------------


def test_same_seed_same_virtual_metrics():
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(50))
    data = sj.sources.synthetic(1_500, low=0, high=1_000, seed=5)

    def once(seed):
        res = sj.run(
            query,
            data,
            sj.topologies.grid(2, 2),
            batch_size=16,
            collect="pairs",
            backend="sim",
            arrival=sim.Arrival.poisson(20_000, seed=seed),
            max_delay=0.001,
        )
        virtual = {k: v for k, v in res.metrics.items() if k not in ("machine", "sim")}
        for a in virtual["actors"].values():
            a.pop("compute_wall_ns")
        return virtual, res.latency_ns(), res.metrics["sim"]["queue_tuples"]

    first, again, other = once(1), once(1), once(2)
    assert first[0] == again[0]
    np.testing.assert_array_equal(first[1], again[1])
    assert first[2] == again[2]
    assert first[0]["latency_ms"] != other[0]["latency_ms"]


def test_arrival_validation():
    with pytest.raises(ValueError, match="either rate"):
        sim.Arrival.constant(10, rate_r=1, rate_s=2)
    with pytest.raises(ValueError, match="positive finite rate"):
        sim.Arrival.poisson(-1)
    with pytest.raises(ValueError, match="arrival must be a sim.Arrival"):
        sj.run(QUERY, _chain_input(4), backend="sim", arrival="poisson")


# -- calibration ---------------------------------------------------------------------------------


def test_calibrate_measures_kernels(tmp_path):
    path = tmp_path / "machine.json"
    prof = sim.calibrate(
        path, indexes=["hash"], quick=True, ray=False, name="here", force=True, idle_gap_s=0.002
    )
    stages = {"hash:panjoin", "hash:handshake", "hash:handshake_ll"}
    assert set(prof.indexes) == {"hash", *stages} and prof.name == "here"
    for key in stages:  # PanJoin's workers' own rows, and each handshake chain's cores'
        assert prof.info["fit"][f"index:{key}"]["steps"] > 100
    assert prof.indexes["hash"]["calls"] + prof.indexes["hash"]["part_calls"] > 0
    assert all(c >= 0 for coefs in prof.roles.values() for c in coefs.values())
    assert prof.info["fit"]["index:hash"]["steps"] > 100
    # steps after idle time (on the index measured) and the processors' share
    assert prof.after_idle.join_ns >= 0 and prof.info["fit"]["after_idle"]["index"] == "hash"
    assert prof.info["fit"]["after_idle"]["gap_s"] == 0.002 == prof.after_idle.ramp[-1][0] / 1e9
    assert len(prof.cpu_share) == os.cpu_count() and all(0 < v <= 1 for v in prof.cpu_share)
    # what the fitted costs miss past the fitted windows (a quick fit: one larger window)
    assert [h for h, _, _ in prof.windows["hash"].points] == [2**15, 2**16]
    assert prof.info["fit"]["window_growth"]["windows"] == [2**15]
    assert sim.MachineProfile.load(path).to_dict() == prof.to_dict()
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(20))
    data = sj.sources.synthetic(300, low=0, high=20, seed=2)
    res = sj.run(
        q, data, sj.topologies.single("hash"), batch_size=8, backend="sim", machine=str(path)
    )
    assert res.same_pairs(sj.oracle.join(q, data))
    assert res.metrics["machine_profile"]["name"] == "here"
    with pytest.raises(ValueError, match="no costs for index 'nested_loop'"):
        sj.run(
            QUERY, _chain_input(8), sj.topologies.single("nested_loop"), backend="sim", machine=prof
        )
    # an index the profile has not measured borrows the costs of one of its kind, loudly
    trees = prof.to_dict() | {"indexes": {"bplus_tree": _profile().indexes["bplus_tree"]}}
    with pytest.warns(UserWarning, match="using those of 'bplus_tree'"):
        res = sj.run(
            QUERY, _chain_input(8), sj.topologies.single("css_tree"), backend="sim", machine=trees
        )
    assert res.metrics["sim"]["index_fallbacks"] == {"css_tree": "bplus_tree"}


def test_calibrate_fits_the_shared_core_on_its_own(tmp_path):
    """An index threads can share gets a second row, ``shared:<index>``, fitted on
    ``shared_index(1, index)``; the shared core is charged from it, and a profile without it
    charges a single core's costs instead, loudly."""
    prof = sim.calibrate(
        indexes=["nested_loop"], quick=True, ray=False, idle_gap_s=None, force=True
    )
    stages = {f"nested_loop:{s}" for s in ("panjoin", "handshake", "handshake_ll")}
    assert set(prof.indexes) == {"nested_loop", "shared:nested_loop", *stages}
    assert prof.info["fit"]["index:shared:nested_loop"]["steps"] > 100
    assert sum(prof.indexes["shared:nested_loop"].values()) > 0
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(40))
    data = sj.sources.synthetic(400, low=0, high=50, seed=4)
    topo = sj.topologies.shared_index(2, "nested_loop", task_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the row is there: no stand-in
        res = sj.run(q, data, topo, batch_size=16, backend="sim", machine=prof)
    assert res.same_pairs(sj.oracle.join(q, data))
    assert res.metrics["sim"]["index_fallbacks"] == {}
    plain = prof.to_dict()
    del plain["indexes"]["shared:nested_loop"]
    with pytest.warns(UserWarning, match="no costs for the shared-index core over 'nested_loop'"):
        res = sj.run(q, data, topo, batch_size=16, backend="sim", machine=plain)
    assert res.metrics["sim"]["index_fallbacks"] == {"shared:nested_loop": "nested_loop"}


def test_calibration_leaves_the_merging_threads_work_out_of_a_step():
    """A shared-index core's thread waits for its merging thread when a merge phase must end:
    the merge's own work (on a thread of its own), which the calibration takes out of the
    step that waited, and out of that one only."""
    calibration = importlib.import_module("streamjoin.runtime.sim.calibrate")  # (the module)

    class Waits:  # what the recorder reads of a shared-index core
        cost_group, cost_key, COUNTERS = "join", "shared:pim_tree", JOIN_COUNTERS
        merge_wait_ns = 0

    core = Waits()
    charge = calibration._Recorder(_profile(), skip=0).bind(core)
    none = (0,) * len(JOIN_COUNTERS)
    assert charge("batch", None, none, none, 9_000) == 9_000
    core.merge_wait_ns += 4_000
    assert charge("batch", None, none, none, 9_000) == 5_000
    assert charge("batch", None, none, none, 9_000) == 9_000


def test_shared_core_is_charged_from_its_own_row():
    """Doubling every coefficient of ``shared:pim_tree`` doubles the shared core's busy time
    at one thread and at two, and leaves a single core's alone."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(300))
    data = sj.sources.synthetic(3000, low=0, high=400, seed=6)
    base = _profile().with_messages(sim.MessageCosts())  # the core's charges, nothing else
    row = base.indexes["shared:pim_tree"]
    doubled = base.to_dict()
    doubled["indexes"]["shared:pim_tree"] = {f: 2 * c for f, c in row.items()}
    assert base.indexes["shared:pim_tree"] == row  # to_dict is a copy (it once was not)

    def busy(topo, machine):
        res = sj.run(q, data, topo, batch_size=128, backend="sim", machine=machine)
        return res.metrics["actors"]["core"]["busy_s"]

    for threads in (1, 2):
        topo = sj.topologies.shared_index(threads, task_size=32)
        assert busy(topo, doubled) == pytest.approx(2 * busy(topo, base), rel=1e-5)  # whole ns
    single = sj.topologies.single("pim_tree")
    assert busy(single, doubled) == busy(single, base)


def test_shared_core_runs_its_tasks_on_the_processors_it_holds():
    """With shared processors, a shared-index step takes as many free ones as its threads use:
    on a host of one processor its two threads' tasks run one after another (as one thread's
    charge), on a host of eight as on a processor per thread; in between, what the other
    actors leave free."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(300))
    data = sj.sources.synthetic(3000, low=0, high=400, seed=6)
    base = _profile().with_messages(sim.MessageCosts()).with_after_idle(sim.IdleCosts())

    def busy(threads, cpus):  # one step a batch (a pipelined core on shared processors is too)
        topo = sj.topologies.shared_index(threads, task_size=32, pipelined=False, step_tuples=0)
        machine = base.with_cpus(cpus)
        res = sj.run(q, data, topo, batch_size=128, backend="sim", machine=machine)
        assert res.same_pairs(sj.oracle.join(q, data))
        return res.metrics["actors"]["core"]["busy_s"]

    two_alone, two_on_one = busy(2, None), busy(2, 1)
    assert busy(2, 8) == pytest.approx(two_alone, rel=1e-9)
    assert two_on_one == pytest.approx(busy(1, 1), rel=0.05)  # the same tasks, one processor
    assert two_alone < 0.8 * two_on_one
    assert two_alone <= busy(2, 2) <= two_on_one


@pytest.mark.slow
def test_calibrate_ray_messages():
    """Through the executor's own hosts: the costs are the raw figures' (the sink's CPU per
    message the receive, the relay's less the sink's the send), the edges plain on loopback
    unless asked to seal."""
    from streamjoin.runtime.sim.ray_messages import IDLE_GAPS_S, _kernel_line, measure_messages
    from streamjoin.runtime.sim.variability import PROBABILITIES, Variability, table_mean

    costs, raw = measure_messages(repeat=50, sizes=(1, 1024), rounds=1, idle_calls=12)
    assert raw["sealed"] is False  # on one machine the executor's edges are plain
    assert costs.send_ns > 0 and costs.recv_ns + costs.recv_per_byte_ns > 0
    small, large = raw["by_batch_size"]["1"], raw["by_batch_size"]["1024"]
    kept = [
        (r["bytes"], max(0.0, r["relay_cpu_ns"] - r["sink_cpu_ns"]), r["sink_cpu_ns"])
        for r in (small, large)
    ]
    np.testing.assert_allclose(costs.measured, kept, atol=0.2)  # the raw figures are rounded
    assert large["bytes"] > small["bytes"] and small["relay_period_ns"] > 0
    gaps = [f"{g * 1e3:g}ms" for g in IDLE_GAPS_S]
    for r in (small, large):
        assert r["one_way_ns"] > 0 and all(r[f"asleep_sink_cpu_ns_{g}"] > 0 for g in gaps)
    # waking after each gap: the stepping thread's CPU a message, less back to back
    woken = raw["wake_after_ns"]
    assert set(woken) == {f"{h}:{n}" for h in ("relay", "sink") for n in (1, 1024)}
    for host_size, after in woken.items():
        host, n = host_size.split(":")
        r = raw["by_batch_size"][n]
        for w, gap in zip(after, gaps, strict=True):
            asleep = r[f"asleep_{host}_thread_ns_{gap}"]
            assert w == pytest.approx(asleep - r[f"{host}_thread_ns"], abs=0.2)
    # the wake is the sink's (the relay's thread also rouses the sink)
    first = max(0.0, float(np.median([w[0] for k, w in woken.items() if k.startswith("sink")])))
    assert costs.wake_ns == 0 and costs.wake_after[0][0] == IDLE_GAPS_S[0] * 1e9
    assert costs.wake_after[0][1] == pytest.approx(first, abs=1.0)  # (the raw are rounded)
    assert costs.wake_after[1][1] >= costs.wake_after[0][1]
    # the driver's own wake: its send asleep, less busy (the median over the sizes)
    driven = raw["driver_wake_after_ns"]
    for k in (0, 1):
        expect = max(0.0, float(np.median([w[k] for w in driven.values()])))
        assert costs.driver_wake_after[k][1] >= expect - 1.0
    assert costs.driver_wake_after[0][1] == pytest.approx(
        max(0.0, float(np.median([w[0] for w in driven.values()]))), abs=1.0
    )
    # the rouse: the driver's send to a host asleep, the driver kept busy, less back to back
    roused = raw["rouse_after_ns"]
    assert set(roused) == {"1", "1024"} and set(raw["driver_wake_after_ns"]) == set(roused)
    for n, after in roused.items():
        r = raw["by_batch_size"][n]
        assert r["driver_send_ns"] > 0
        for w, gap in zip(after, gaps, strict=True):
            assert w == pytest.approx(
                r[f"busy_driver_send_ns_{gap}"] - r["driver_send_ns"], abs=0.2
            )
    first = max(0.0, float(np.median([w[0] for w in roused.values()])))
    assert costs.rouse_after[0] == (IDLE_GAPS_S[0] * 1e9, pytest.approx(first, abs=1.0))
    assert costs.rouse_after[1][1] >= costs.rouse_after[0][1]
    assert set(raw["cyclic_recv_ns"]) == set(woken)
    handed = max(0.0, float(np.median(list(raw["cyclic_recv_ns"].values()))))
    assert costs.cyclic_recv_ns == pytest.approx(handed, abs=1.0)
    # the hosts joined as many tuples as each batch held between messages, left out of the
    # figures; the relay merged each batch with itself: a line over the merged bytes
    assert all(r["work_ns"] > 0 and r["merge_ns"] > 0 for r in (small, large))
    # and the join work right after each gap, beside its median back to back (raw only)
    for r in (small, large):
        assert r["work_median_ns"] > 0 and all(r[f"asleep_work_ns_{g}"] > 0 for g in gaps)
    merges = np.polyfit(
        [2 * small["bytes"], 2 * large["bytes"]], [small["merge_ns"], large["merge_ns"]], 1
    )
    assert costs.merge_per_byte_ns == pytest.approx(max(0.0, merges[0]), rel=1e-3, abs=1e-6)
    if merges[0] > 0:  # (a line through both; one falling is clipped to their mean)
        assert costs.merge_cost(2 * large["bytes"]) == pytest.approx(large["merge_ns"], rel=0.01)
    # the spread: the relay's join work at 1,024 tuples after either gap (mean 1), the
    # one-way times of both sizes at the longer gap (median 1), 10 steps of each run (of 11
    # step to step, the first left out)
    spread = raw["spread"]
    assert spread["samples"] == {"step": 2 * 10, "message": 2 * 10}
    step, message = Variability(spread["step"], spread["message"]), spread["message"]
    assert table_mean(step.step) == pytest.approx(1.0, abs=1e-3)
    assert message[PROBABILITIES.index(0.5)] == pytest.approx(1.0, abs=1e-3)
    # the kernel's delivery: the machine's softirq time over each size's runs, whose frames
    # (the driver's to the relay and the relay's to the sink, on both pairs) are counted: 50
    # back to back on each pair, 12 at each gap asleep and again busy
    kernel = raw["kernel"]
    assert kernel["frames"] == {"1": 2 * (50 + 50 + 2 * 2 * 12), "1024": 296}
    assert all(t >= 0 for t in kernel["softirq_ms"].values())
    for n, rounds in kernel["softirq_ms_by_round"].items():  # (one round here)
        assert kernel["softirq_ms"][n] == pytest.approx(np.median(rounds) * len(rounds), abs=0.1)
    sizes = ("1", "1024")
    line = _kernel_line(
        np.array([raw["by_batch_size"][n]["bytes"] for n in sizes]),
        np.array([kernel["frames"][n] for n in sizes]),
        np.array([kernel["softirq_ms"][n] * 1e6 for n in sizes]),
    )
    got = (costs.kernel_ns, costs.kernel_per_byte_ns)
    np.testing.assert_allclose(got, line, rtol=1e-3, atol=0.2)  # (the raw are rounded)
    # the hop: the one-way time at the longer gap less both ends' work, the kernel's
    # delivery (in the relay's write) among it
    ends = [s + costs.kernel_cost(b) + r + costs.wake_after[1][1] for b, s, r in costs.measured]
    one_way = [raw["by_batch_size"][n]["one_way_ns"] for n in sizes]
    hop = max(0.0, float(np.median(np.subtract(one_way, ends))))
    assert costs.hop_ns == pytest.approx(hop, abs=2.0)
    _, sealed = measure_messages(repeat=20, sizes=(1,), rounds=1, idle_calls=3, sealed=True)
    assert sealed["spread"]["step"] == () and sealed["spread"]["message"] == ()  # too few
    assert sealed["sealed"] is True and sealed["by_batch_size"]["1"]["sink_cpu_ns"] > 0


def test_the_kernels_delivery_is_a_line_over_frames_and_bytes():
    """The softirq totals of a few message sizes give the kernel's delivery per frame and
    per byte; a line that would fall or start below 0 is clipped to one term."""
    from streamjoin.runtime.sim.ray_messages import _kernel_line

    nbytes, frames = np.array([65.0, 50_000.0, 800_000.0]), np.array([3_000.0, 3_000.0, 900.0])
    spent = frames * (9_000.0 + 0.125 * nbytes)
    assert _kernel_line(nbytes, frames, spent) == pytest.approx((9_000.0, 0.125))
    falling = frames * np.array([20_000.0, 10_000.0, 5_000.0])  # less for more bytes
    assert _kernel_line(nbytes, frames, falling) == (pytest.approx(falling.sum() / 6_900), 0.0)
    bytes_only = frames * 0.1 * nbytes - frames * 5_000.0  # a line below 0 at no bytes
    per_byte = bytes_only.sum() / (frames * nbytes).sum()
    assert _kernel_line(nbytes, frames, bytes_only) == (0.0, pytest.approx(per_byte))
    assert _kernel_line(nbytes, np.zeros(3), np.zeros(3)) == (0.0, 0.0)


def test_the_kernels_delivery_is_charged_to_the_sender():
    """A profile's kernel costs are its senders' as a send's are (every virtual time the
    same as with them in the send), and each actor counts what it was charged for them."""
    p = _profile()
    assert not p.messages.measured  # (sends on the lines)
    kernel = {"kernel_ns": 7_000.0, "kernel_per_byte_ns": 0.25}
    with_kernel = p.with_messages(dataclasses.replace(p.messages, **kernel))
    in_send = p.with_messages(
        dataclasses.replace(
            p.messages,
            send_ns=p.messages.send_ns + 7_000.0,
            send_per_byte_ns=p.messages.send_per_byte_ns + 0.25,
        )
    )
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(64))
    data = sj.sources.synthetic(3_000, low=0, high=3_000, seed=5)
    kw = {"backend": "sim", "batch_size": 32, "arrival": sim.Arrival.constant(20_000.0)}
    for topo in (sj.topologies.split(2), sj.topologies.handshake(2)):
        got = sj.run(q, data, topo, machine=with_kernel, **kw).metrics
        same = sj.run(q, data, topo, machine=in_send, **kw).metrics
        plain = sj.run(q, data, topo, machine=p, **kw).metrics
        assert got["latency_ms"] == same["latency_ms"] != plain["latency_ms"]
        assert got["elapsed_s"] == same["elapsed_s"]
        for name, a in got["actors"].items():
            assert a["busy_s"] == same["actors"][name]["busy_s"], (topo.name, name)
            assert same["actors"][name]["kernel_ns"] == 0
            if a["batches_out"]:
                # at least the per-frame part for every message, its bytes' part besides
                assert a["kernel_ns"] > 7_000 * a["batches_out"], (topo.name, name)
            else:
                assert a["kernel_ns"] == 0
    # the same as the send's: a profile whose sends cost the kernel's delivery more
    m = with_kernel.messages
    batch = _batch_of(8)
    nbytes = sim.message_nbytes(batch)
    send, _ = p.messages.send_recv(nbytes)
    assert m.send_recv(nbytes)[0] == pytest.approx(send + 7_000.0 + 0.25 * nbytes)
    assert sim.CostModel(with_kernel).message_ns(batch)[0] == round(send + 7_000 + 0.25 * nbytes)
    assert m.scaled(2.0).kernel_cost(nbytes) == pytest.approx(m.kernel_cost(nbytes) / 2)
    constant = p.with_messages(sim.MessageCosts(send_ns=1_000.0, kernel_ns=500.0))
    assert sim.CostModel(constant).message_ns(batch) == (1_500, 0, 0)


def test_steps_after_idle_are_timed_in_blocks_of_one_gap(monkeypatch):
    """The after-idle recorder holds a gap for a block of steps and keeps the block's later
    half: every step kept followed steps that all had the same gap before them (a gapless
    one runs hot, as the fitted kernels' steps do), and it sleeps before each step of a
    block with a gap."""
    calibrate = importlib.import_module("streamjoin.runtime.sim.calibrate")
    slept = []
    monkeypatch.setattr(calibrate.time, "sleep", slept.append)
    block = calibrate.GAP_BLOCK
    rec = calibrate._GapRecorder(sj.runtime.sim.default_profile(), -1, (0.0, 0.005), seed=3)
    charge = rec.bind(dataclasses.make_dataclass("Logic", [("cost_group", str)])("join"))
    n = 1 + 12 * block
    for i in range(n):
        charge("batch", None, (), (), i)
    kept = rec.times["join"]
    gaps = {}  # each block's gap, from what was kept (its steps 1 + block * k ... )
    for gap, walls in kept.items():
        for w in walls:
            assert (w - 1) % block >= block // 2  # the later half of its block
            gaps.setdefault((w - 1) // block, set()).add(gap)
    assert set(gaps) == set(range(12)) and all(len(g) == 1 for g in gaps.values())
    assert sum(map(len, kept.values())) == 12 * block // 2
    assert set(kept) == {0.0, 0.005} and all(kept.values())  # (seed 3 draws both)
    expected = [gap for b in range(12) for gap in gaps[b] for _ in range(block) if gap]
    # before every step of a block with a gap (the last step drew the next block's)
    assert slept[: len(expected)] == expected and len(slept) - len(expected) <= 1


def test_the_emitters_rest_comes_right_before_its_logic(monkeypatch):
    """In the emitter's own runs the after-idle recorder rests right before the emitter's
    logic (a paced source's driver calls it as its pacing sleep ends) and keeps the time of
    the logic alone; its blocks count the emitter's steps, and the other actors' steps
    neither rest nor are kept."""
    calibrate = importlib.import_module("streamjoin.runtime.sim.calibrate")
    events = []
    monkeypatch.setattr(calibrate.time, "sleep", lambda s: events.append(("rest", s)))

    class Emitter:
        cost_group = "emitter"

        def on_chunk(self, cols, ingest_ns=None):
            events.append(("logic", len(cols)))
            return []

    block = calibrate.GAP_BLOCK
    rec = calibrate._GapRecorder(sj.runtime.sim.default_profile(), -1, (0.0, 0.005), 3, True)
    emitter = Emitter()
    emitter_charge = rec.bind(emitter)
    join_charge = rec.bind(dataclasses.make_dataclass("Logic", [("cost_group", str)])("join"))
    n = 1 + 12 * block  # the first step starts the first block
    for _ in range(n):
        emitter.on_chunk([0] * 4)  # what the simulator calls: the logic's attribute
        wall = 10**9  # the simulator's wall time around the call, its rest within
        assert emitter_charge("chunk", [0] * 4, (), (), wall) < wall  # the logic's own
        for _ in range(3):
            assert join_charge("batch", None, (), (), 5) == 5
    assert events.count(("logic", 4)) == n
    rests = [k for k, e in enumerate(events) if e[0] == "rest"]
    assert rests and all(events[k + 1][0] == "logic" for k in rests)
    kept = rec.times["emitter"]
    assert sum(map(len, kept.values())) == 12 * block // 2 and all(kept.values())
    assert all(0 <= ns < wall for walls in kept.values() for ns in walls)
    assert not any(rec.times["join"].values())
    # a block's gap before each of its steps: the rests come in runs of whole blocks
    assert len(rests) % block == 0 and {events[k][1] for k in rests} == {0.005}


def test_measure_after_idle_and_cpu_share():
    costs, raw = sim.measure_after_idle(
        "nested_loop",
        gap_s=0.002,
        window=256,
        batches=(8, 64),
        steps=8,
        rounds=1,
        emitter_chunks=(32,),
    )
    # the emitter's figures from its own runs, its rest right before its logic
    assert set(raw["steps"]) == {
        f"{g}:{w}" for g in ("join", "collector") for w in ("single:8", "single:64", "panjoin:64")
    } | {"manager:panjoin:64", "emitter:single:32", "emitter:grid:32"}
    for group in ("emitter", "join", "manager", "collector"):
        assert costs.of(group) >= 0
    assert all(r["hot_ns"] > 0 and r["after_idle_ns"] > 0 for r in raw["steps"].values())
    gaps = [g for g, _ in costs.ramp]
    assert gaps == sorted(gaps) and gaps[-1] == 0.002e9 and costs.ramp[-1][1] == 1.0
    assert len(gaps) == 1 + sum(0 < g < 0.002 for g in sim.RAMP_GAPS_S)
    assert all(0 <= f <= 1 for _, f in costs.ramp)
    assert all(len(r["after_gap_ns"]) == len(gaps) for r in raw["steps"].values())
    share, raw = sim.measure_cpu_share(2, seconds=0.1, rounds=1)
    assert len(share) == 2 and all(0 < v <= 1 for v in share)
    assert set(raw["by_busy"]) == {"1", "2"}


# -- fidelity against Ray ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [
        lambda: sj.topologies.single("bplus_tree"),
        lambda: sj.topologies.split(2, "bplus_tree"),
        lambda: sj.topologies.grid(1, 2, "bplus_tree"),
    ],
)
def test_sim_within_2x_of_ray(make):
    """The shipped profile against a measured Ray run on this machine, for the layouts the
    issue names: unpaced throughput and paced p50 latency within 2x, as one run each on a
    shared host allows (the issue's 25% target is reported, over repeated runs and with its
    causes, by experiments/sim_fidelity.py: the shipped profile 0.81-1.25 in three runs on
    2026-11-26)."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        data = sj.sources.synthetic(40_000, low=0, high=400_000, seed=1)
        x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
        eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=4096, match_rate=2)
        query = sj.Query(sj.band("x", eps), window=sj.CountWindow(4096))
        topo = make()
        kw = {"collect": "count", "progress": False}
        fast = {"batch_size": 1024, "chunk_rows": 1024, **kw}
        # Ray's driver and actors share this host's processors; so do the simulated ones
        host = sim.default_profile().with_cpus(os.cpu_count())
        measured = sj.run(query, data, topo, backend="ray", **fast)
        simulated = sj.run(
            query,
            data,
            topo,
            backend="sim",
            machine=host,
            arrival=sim.Arrival.constant(1e12),
            **fast,
        )
        ratio = simulated.metrics["input_tuples_per_s"] / measured.metrics["input_tuples_per_s"]
        assert 1 / 2 < ratio < 2, f"{topo.name}: unpaced throughput sim/ray = {ratio:.2f}"
        rate = float(round(0.25 * measured.metrics["input_tuples_per_s"], -2))
        chunk = max(1, int(rate / 100))  # 10 ms of input, one batch each
        paced = data.slice(0, int(2 * rate))
        slow = {"batch_size": chunk, "chunk_rows": chunk, "max_delay": 0.0, **kw}
        measured = sj.run(query, paced, topo, backend="ray", pace=rate, **slow)
        simulated = sj.run(
            query,
            paced,
            topo,
            backend="sim",
            machine=host,
            arrival=sim.Arrival.constant(rate),
            **slow,
        )
        ratio = simulated.metrics["latency_ms"]["p50"] / measured.metrics["latency_ms"]["p50"]
        assert 1 / 2 < ratio < 2, f"{topo.name}: paced p50 latency sim/ray = {ratio:.2f}"
    finally:
        if started:
            ray.shutdown()


def test_a_pipelined_shared_core_overlaps_its_steps_and_flushes_when_idle():
    """A pipelined shared-index core (the default) runs a batch's tasks on its pool threads
    while its own thread sends the last batch's pairs and receives the next batch: unpaced,
    more tuples a virtual second than one step a batch; paced so that the core waits for
    input, its pairs leave as soon as nothing waits (the idle flush), so latency is what
    the synchronous core gives, not one batch gap more. Exact either way."""
    data = sj.sources.synthetic(16_000, low=0, high=1 << 20, attrs=("x",), rate=10**6, seed=2)
    q = sj.Query(sj.band("x", 8), window=sj.CountWindow(1 << 12))
    got = {}
    for pace in (1e12, 20_000):
        for pipelined in (False, True):
            topology = sj.topologies.shared_index(8, pipelined=pipelined)
            res = sj.run(q, data, topology, backend="sim", pace=pace, collect="count")
            got[pace, pipelined] = res.metrics
    n = {m["output_pairs"] for m in got.values()}
    assert n == {len(sj.oracle.join(q, data))}
    fast, slow = got[1e12, True], got[1e12, False]
    assert fast["input_tuples_per_s"] > 1.03 * slow["input_tuples_per_s"]
    idle, sync = got[20_000, True]["latency_ms"], got[20_000, False]["latency_ms"]
    assert idle["p99"] <= 1.01 * sync["p99"] and idle["p50"] <= 1.01 * sync["p50"]


def test_the_simulator_pipelines_a_shared_core_by_default_where_each_thread_has_a_processor():
    """``pipelined=None`` on ``sim``: as a host of the simulated machine's processors would
    decide (two workers, the core's thread, the emitter and the collector need 5); on
    shared processors the pool takes only those free, so on 2 the pipelined core is slower
    than one step a batch, and on 6 faster."""
    data = sj.sources.synthetic(8_000, low=0, high=12_000, seed=4)
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(2048))
    expected = sj.oracle.join(q, data)
    got = {}
    for cpus in (2, 6, None):
        for pipelined in (None, True, False):
            machine = _profile().with_cpus(cpus)
            topology = sj.topologies.shared_index(2, pipelined=pipelined)
            res = sj.run(q, data, topology, backend="sim", machine=machine, pace=1e12)
            assert res.same_pairs(expected)
            got[cpus, pipelined] = res.metrics["input_tuples_per_s"]
    for cpus in (2, 6, None):
        assert got[cpus, None] == got[cpus, cpus != 2], cpus
    assert got[2, True] < got[2, False] and got[6, True] > got[6, False]


def test_a_flooded_run_holds_its_backlog_at_the_source():
    """The executor's edges that lie on no cycle are bounded (an inbox and the sockets'
    buffers): a flooded run's backlog waits at the emitter, not in the cores' mailboxes; a
    handshake chain (whose edges between neighbours lie on cycles and stay unbounded) keeps
    its exact answer with its emitter's edges bounded."""
    from streamjoin.runtime.coalesce import EDGE_BUFFER_BYTES

    q = sj.Query(sj.band("x", 5), window=sj.CountWindow(2048))
    data = sj.sources.synthetic(100_000, low=0, high=250_000, seed=3)
    machine = sim.default_profile().with_cpus(2)
    kw = {"backend": "sim", "machine": machine, "batch_size": 256, "chunk_rows": 256}
    flood = sim.Arrival.constant(1e12)
    res = sj.run(q, data, sj.topologies.single(), arrival=flood, **kw)
    core, emitter = res.metrics["actors"]["core"], res.metrics["actors"]["emitter"]
    room = INBOX + 2 * EDGE_BUFFER_BYTES // (256 * 41)  # a batch's tuple: 41 bytes and x
    assert core["peak_queue"] <= room < emitter["batches_out"] / 4
    assert emitter["peak_queue"] > 100  # the chunks wait at the source
    chain = sj.run(q, data.slice(0, 30_000), sj.topologies.handshake(2), arrival=flood, **kw)
    assert chain.same_pairs(sj.oracle.join(q, data.slice(0, 30_000)))


def test_spo_stages_are_charged_with_their_own_costs():
    """SPO-Join's mutable stage and its workers have cost keys of their own
    (``po_join:mutable``, ``po_join:worker``); a profile without them charges ``po_join``'s."""
    p = sim.default_profile().with_after_idle(sim.IdleCosts())
    assert "po_join:mutable" not in p.indexes
    doubled = {f: 2 * c for f, c in p.indexes["po_join"].items()}
    own = dataclasses.replace(p, indexes={**p.indexes, "po_join:mutable": doubled})
    q = sj.Query(sj.less("a") & sj.greater("b"), window=sj.CountWindow(256))
    data = sj.sources.inequality_workload(4_000, 256, 2.0, seed=1)
    kw = {"backend": "sim", "batch_size": 64, "arrival": sim.Arrival.constant(1e5)}
    base = sj.run(q, data, sj.topologies.spo(2), machine=p, **kw).metrics["actors"]
    more = sj.run(q, data, sj.topologies.spo(2), machine=own, **kw).metrics["actors"]
    assert more["mutable"]["step_cpu_s"] == pytest.approx(2 * base["mutable"]["step_cpu_s"])
    for worker in ("worker0", "worker1"):
        assert more[worker]["step_cpu_s"] == pytest.approx(base[worker]["step_cpu_s"])


@pytest.mark.parametrize(
    ("topo", "stage", "actors"),
    [
        (sj.topologies.panjoin(2, 4, "bplus_tree"), "panjoin", ("worker0", "worker1")),
        (sj.topologies.handshake(2, "bplus_tree"), "handshake", ("core0", "core1")),
        (
            sj.topologies.handshake(2, "bplus_tree", low_latency=True),
            "handshake_ll",
            ("core0", "core1"),
        ),
    ],
    ids=["panjoin", "handshake", "handshake_ll"],
)
def test_a_layouts_join_actors_are_charged_with_their_own_costs(topo, stage, actors):
    """PanJoin's workers and each handshake chain's cores have a cost key of their own
    (``<index>:<stage>``); a profile without it charges the index's."""
    p = sim.default_profile().with_after_idle(sim.IdleCosts())
    assert f"bplus_tree:{stage}" not in p.indexes
    doubled = {f: 2 * c for f, c in p.indexes["bplus_tree"].items()}
    own = dataclasses.replace(p, indexes={**p.indexes, f"bplus_tree:{stage}": doubled})
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(256))
    data = sj.sources.synthetic(4_000, low=0, high=4_000, seed=1)
    # slow enough that no core's batches wait and merge, whichever the costs
    kw = {"backend": "sim", "batch_size": 64, "arrival": sim.Arrival.constant(2e4)}
    base = sj.run(q, data, topo, machine=p, **kw).metrics["actors"]
    more = sj.run(q, data, topo, machine=own, **kw).metrics["actors"]
    for name in actors:
        assert more[name]["step_cpu_s"] == pytest.approx(2 * base[name]["step_cpu_s"]), name
    # (the collector's steps take what comes together: slower cores' pairs merge otherwise)
    assert more["emitter"]["step_cpu_s"] == pytest.approx(base["emitter"]["step_cpu_s"])


@pytest.mark.parametrize("index", ["pim_tree", "nested_loop"])
def test_a_shared_cores_scan_counts_the_rows_its_tasks_scanned(index):
    """A shared-index core's ``scan`` is the rows its tasks scanned one by one (past the edge
    tuple, or the whole window without an index), as its ``stats()`` report them: what its
    cost rows are fitted on."""
    query = sj.Query(sj.band("x", 5), window=sj.CountWindow(64))
    data = sj.sources.synthetic(900, low=0, high=1_000, seed=3)
    logics, _ = _drive(sj.topologies.shared_index(1, index), query, data, 32)
    core = next(lg for lg in logics.values() if lg.cost_group == "join")
    scan = core.counters()[JOIN_COUNTERS.index("scan")]
    assert scan == core.stats()["scanned"] > 0


@pytest.mark.parametrize("layout", list(EVERY_LAYOUT))
def test_every_actor_that_handles_tuples_says_when_its_steps_began_and_ended(layout):
    """Whatever messages a layout's actors pass (batches, pairs, PanJoin's worker commands,
    SPO's runs and merges), each actor that handled tuples keeps its steps' lags: a begin
    after the tuples' arrival, an end no earlier, a charge within the two."""
    q = sj.Query(sj.band("x", 3), window=sj.CountWindow(60))
    data = sj.sources.synthetic(600, low=0, high=2000, seed=5)
    res = sj.run(q, data, EVERY_LAYOUT[layout](), backend="sim", arrival=sim.Arrival.constant(1e5))
    for name, actor in res.metrics["actors"].items():
        if actor["tuples_in"]:
            lag = actor["lag_ms"]
            assert lag["steps"] > 0 and 0 <= lag["start_p50"] <= lag["end_p50"], name
            assert 0 <= lag["cpu_p50"] <= lag["end_p50"], name
            assert 0 <= lag["step_p50"] <= lag["end_p50"], name
