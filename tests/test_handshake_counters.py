"""What the handshake chains' cores count for the simulator's charge
(:class:`~streamjoin.actors.join_spec.JoinWork`): an acknowledgement's step drops tuples and
calls nothing else, so it counts them as expired and no part call; a low-latency core's drain
drops what it stored, and counts it."""

import streamjoin as sj
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.handshake import Ack, HandshakeCore
from streamjoin.actors.handshake_ll import LowLatencyHandshakeCore
from streamjoin.actors.router import Drain, HandshakeRoute
from streamjoin.validation import validate


def test_an_acknowledgement_counts_what_it_drops_and_no_part_call():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(8))
    em = Emitter(q, batch_size=4, route=HandshakeRoute(paired=True))
    chunk = validate({"stream": [0] * 12, "x": [float(k) for k in range(12)]}, q)
    r_batches = [m for p, m in em.on_chunk(chunk) if p == "row0"]
    core = HandshakeCore(q, 0, 2, capacity=(4, 4))
    forwarded = [m for b in r_batches for p, m in core.on_batch("r_in", b) if p == "r_out"]
    assert forwarded  # beyond its segment of 4, R went on to core 1, kept until acknowledged
    held = len(core.parts[0].store)
    before = core.work.as_tuple()
    core.on_batch("r_ack", Ack(int(forwarded[-1].idx[-1]) + 1))  # core 1 holds them now
    gone = held - len(core.parts[0].store)
    after = core.work.as_tuple()
    diff = dict(
        zip(core.COUNTERS, (a - b for a, b in zip(after, before, strict=True)), strict=True)
    )
    assert gone > 0 and diff["expired"] == gone
    assert diff["part_calls"] == 0 and diff["tuples"] == 0 and diff["probes"] == 0


def test_a_low_latency_drain_counts_what_it_drops():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(64))
    em = Emitter(q, batch_size=4, route=HandshakeRoute())
    chunk = validate({"stream": [0] * 8, "x": [float(k) for k in range(8)]}, q)
    core = LowLatencyHandshakeCore(q, 0, 1)  # a chain of one: every batch's home
    for port, msg in em.on_chunk(chunk):
        core.on_batch({"row0": "r_in", "col0": "s_in"}[port], msg)
    stored = len(core.parts[0].store)
    assert stored == 8
    expired = core.work.expired
    core.on_batch("s_in", Drain())  # no S comes: the R stored here has nothing left to meet
    assert len(core.parts[0].store) == 0 and core.work.expired - expired == stored
