"""Frames between Ray hosts: every message kind comes back as it was sent, in order, read-only,
on plain and on sealed edges.

(The handshake, intruders, tampering and fuzzing: ``test_channel_security.py``.)"""

import contextlib
import socket

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from records import sealed

from streamjoin.actors.handshake import Ack
from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.actors.router import Drain
from streamjoin.actors.spo import MergedRun, SubtreePairs
from streamjoin.batch import Batch, Marker, PairBatch
from streamjoin.runtime.ray import channels, wire

KEY = bytes(range(32, 64))


@contextlib.contextmanager
def ends(sealed: bool):
    """The sending and the receiving channel of one edge (sealed: under one key)."""
    a, b = socket.socketpair()
    key = KEY if sealed else None
    try:
        yield (
            channels.Channel(a, "a", "b", key, sending=True),
            channels.Channel(b, "a", "a", key, sending=False),
        )
    finally:
        a.close()
        b.close()


@pytest.fixture(params=[False, True], ids=["plain", "sealed"])
def pair(request):
    with ends(request.param) as both:
        yield both


def _batch(n: int, k: int, seed: int, store: bool) -> Batch:
    rng = np.random.default_rng(seed)
    ints = rng.integers(-(2**62), 2**62, (5, n))
    return Batch(
        seq=ints[0],
        stream=rng.integers(0, 2, n).astype(np.int8),
        idx=ints[1],
        ts=ints[2],
        ingest_ns=ints[3],
        lo_idx=ints[4],
        attrs=rng.normal(size=(k, n)),
        horizon=rng.integers(0, 2**40, 2),
        store=store,
    )


def _same_batch(a: Batch, b: Batch) -> bool:
    return (
        all(
            np.array_equal(getattr(a, f), getattr(b, f))
            for f in ("seq", "stream", "idx", "ts", "ingest_ns", "lo_idx", "attrs", "horizon")
        )
        and a.store == b.store
        and b.stream.dtype == np.int8
        and b.attrs.shape == a.attrs.shape
    )


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(0, 2000),
    k=st.integers(1, 3),
    seed=st.integers(0, 99),
    store=st.booleans(),
    sealed=st.booleans(),
)
def test_batch_round_trip(n, k, seed, store, sealed):
    with ends(sealed) as (a, b):
        sent = _batch(n, k, seed, store)
        a.send([channels.frame("r_in", channels.payload(sent))])
        port, got = b.recv()
        assert port == "r_in" and _same_batch(sent, got)
        assert not got.seq.flags.writeable and not got.attrs.flags.writeable
        assert got.attrs.flags.c_contiguous
        assert all(got.__dict__[c].ctypes.data % 8 == 0 for c in ("seq", "attrs"))  # aligned


def test_views_and_other_messages_in_order(pair):
    a, b = pair
    big = _batch(50, 2, 1, True)
    sliced = big.take(np.arange(0, 50, 3))  # taken rows
    strided = Batch(**{**big.__dict__, "attrs": np.asfortranarray(big.attrs)})  # not C order
    pairs = PairBatch(np.arange(4), np.arange(4) + 9, np.arange(4) * 7)
    command = WorkerCommand(big, [1], [(0, [0])], [(1, np.arange(3, 50, 2))], [0])
    msgs = [sliced, strided, pairs, PairBatch.empty(), Drain(), command]
    body = channels.payload(pairs)
    frames = [channels.frame(f"p{i}", channels.payload(m)) for i, m in enumerate(msgs)]
    frames.append(channels.frame("again", body))  # one payload, framed for a second edge
    a.send(frames + [channels.end_frame()])
    got = [b.recv() for _ in range(len(frames))]
    assert [p for p, _ in got] == [f"p{i}" for i in range(len(msgs))] + ["again"]
    assert _same_batch(sliced, got[0][1]) and _same_batch(strided, got[1][1])
    for k in (2, 6):
        assert all(
            np.array_equal(getattr(got[k][1], c), getattr(pairs, c))
            for c in ("r", "s", "ingest_ns")
        )
    assert len(got[3][1]) == 0 and isinstance(got[4][1], Drain)
    assert _same_command(command, got[5][1])
    assert b.recv() is channels.END and b.ended and b.frames == a.frames == len(frames) + 1


def test_a_connection_closed_before_the_end_frame_raises(pair):
    a, b = pair
    frame = channels.frame("in", channels.payload(_batch(1000, 1, 2, True)))
    a.send([frame])
    plain = b"".join(bytes(memoryview(p).cast("B")) for p in frame)
    whole = plain if a.sealer is None else sealed(a.sealer, [frame])
    a.sock.sendall(whole[:40])  # cut short
    a.close()
    assert b.recv()[0] == "in"
    with pytest.raises(channels.ChannelClosed, match="middle of a frame"):
        b.recv()


def test_a_connection_closed_after_the_end_frame_says_so(pair):
    a, b = pair
    a.send([channels.end_frame()])
    a.close()
    assert b.recv() is channels.END
    with pytest.raises(channels.ChannelClosed, match="after ending the edge"):
        b.recv()


def _same_command(a: WorkerCommand, b: WorkerCommand) -> bool:
    return (
        _same_batch(a.batch, b.batch)
        and (a.create, a.probe, a.expire) == (b.create, b.probe, b.expire)
        and [s for s, _ in a.insert] == [s for s, _ in b.insert]
        and all(
            np.array_equal(p, q) and q.dtype == np.int64 and not q.flags.writeable
            for (_, p), (_, q) in zip(a.insert, b.insert, strict=True)
        )
    )


def _round_trip(message, sealed: bool = True):
    with ends(sealed) as (a, b):
        a.send([channels.frame("port", channels.payload(message))])
        port, got = b.recv()
        assert port == "port" and type(got) is type(message)
        return got


@st.composite
def worker_commands(draw) -> WorkerCommand:
    """A command as the PanJoin manager makes them: a batch, subwindow ids, probes by stream
    and inserts of non-empty runs of the batch's positions."""
    n = draw(st.integers(1, 300))
    batch = _batch(n, draw(st.integers(1, 3)), draw(st.integers(0, 99)), draw(st.booleans()))
    ids = st.integers(0, 2**40)
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), max_size=4, unique=True))) if n > 1 else []
    runs = np.split(np.arange(n, dtype=np.int64), cuts)
    return WorkerCommand(
        batch,
        create=draw(st.lists(ids, max_size=3)),
        probe=draw(st.lists(st.tuples(st.integers(0, 1), st.lists(ids, max_size=5)), max_size=2)),
        insert=[(draw(ids), r) for r in draw(st.lists(st.sampled_from(runs), max_size=3))],
        expire=draw(st.lists(ids, max_size=3)),
    )


@settings(max_examples=examples(80), deadline=None)
@given(command=worker_commands())
def test_worker_command_round_trip(command):
    assert _same_command(command, _round_trip(command))


@settings(max_examples=examples(40), deadline=None)
@given(n=st.integers(0, 500), k=st.integers(1, 3), seed=st.integers(0, 99))
def test_merged_run_round_trip(n, k, seed):
    """A merged piece of SPO-Join's mutable part: its rows and both key orders."""
    rng = np.random.default_rng(seed)
    run = MergedRun(
        int(rng.integers(0, 2**40)),
        n % 2,
        _batch(n, k, seed, True),
        rng.permutation(n),
        rng.permutation(n),
    )
    got = _round_trip(run)
    assert (got.piece, got.stream) == (run.piece, run.stream) and _same_batch(run.rows, got.rows)
    assert np.array_equal(got.a_order, run.a_order) and np.array_equal(got.b_order, run.b_order)
    assert not got.a_order.flags.writeable


def test_a_merged_run_ordering_positions_outside_its_rows_is_a_framing_error():
    z = np.arange(4, dtype=np.int64)
    run = MergedRun(0, 0, _batch(4, 1, 0, True), z, z + 1)
    with pytest.raises(channels.FramingError, match="out of its 4 rows"):
        _round_trip(run)


@settings(max_examples=examples(20), deadline=None)
@given(n=st.integers(0, 2000), batch=st.integers(-1, 2**62), seed=st.integers(0, 99))
def test_subtree_pairs_round_trip(n, batch, seed):
    """A PO-Join worker's report up its combining tree: the batch number (-1: pairs sent
    early, with a progress marker) and the pairs."""
    rng = np.random.default_rng(seed)
    report = SubtreePairs(batch, PairBatch(*rng.integers(-(2**62), 2**62, (3, n))))
    got = _round_trip(report)
    assert got.batch == batch and len(got) == n
    assert all(np.array_equal(getattr(got.pairs, c), getattr(report.pairs, c)) for c in "rs")


def test_a_subtree_report_of_a_negative_batch_is_a_framing_error():
    with pytest.raises(channels.FramingError, match="names batch -2"):
        _round_trip(SubtreePairs(-2, PairBatch.empty()))


@given(upto=st.integers(-(2**63), 2**63 - 1))
def test_ack_round_trip(upto):
    assert _round_trip(Ack(upto)) == Ack(upto)


@given(st.integers(1, 2**62), st.lists(st.integers(0, 2**62), min_size=3, max_size=3))
def test_marker_round_trip(number, rows):
    assert _round_trip(Marker(number, *rows)) == Marker(number, *rows)


def test_a_marker_numbered_below_one_is_a_framing_error():
    with pytest.raises(wire.FramingError, match="progress marker numbered 0"):
        _round_trip(Marker(0))


@settings(max_examples=examples(30), deadline=None)
@given(n=st.integers(0, 3000), seed=st.integers(0, 99))
def test_pairs_and_drain_round_trip(n, seed):
    rng = np.random.default_rng(seed)
    pairs = PairBatch(*rng.integers(-(2**62), 2**62, (3, n)))
    got = _round_trip(pairs)
    assert all(np.array_equal(getattr(got, c), getattr(pairs, c)) for c in ("r", "s", "ingest_ns"))
    assert not got.r.flags.writeable
    assert _round_trip(Drain()) == Drain()


def test_a_message_without_a_codec_is_refused_at_the_sender():
    with pytest.raises(TypeError, match="no wire encoding for dict"):
        channels.payload({"cmd": 1})


def test_a_kind_or_type_registered_twice_is_refused():
    with pytest.raises(ValueError, match="already has a codec"):
        wire.register(wire.Codec(1, dict, lambda m: (b"", []), lambda meta, body: {}))
    with pytest.raises(ValueError, match="already has a codec"):
        wire.register(wire.Codec(200, Ack, lambda m: (b"", []), lambda meta, body: Ack(0)))
