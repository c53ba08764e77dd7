"""Frames between Ray hosts: every message comes back as it was sent, in order, read-only."""

import socket

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.actors.router import Drain
from streamjoin.batch import Batch, PairBatch
from streamjoin.runtime import channels


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


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


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 2000), k=st.integers(1, 3), seed=st.integers(0, 99), store=st.booleans())
def test_batch_round_trip(n, k, seed, store):
    a, b = socket.socketpair()
    try:
        sent = _batch(n, k, seed, store)
        channels.send(a, [channels.frame("r_in", channels.payload(sent))])
        port, got = channels.recv(b)
        assert port == "r_in" and _same_batch(sent, got)
        assert not got.seq.flags.writeable and not got.attrs.flags.writeable
        assert got.attrs.flags.c_contiguous
    finally:
        a.close()
        b.close()


def test_views_and_other_messages_in_order(pair):
    a, b = pair
    big = _batch(50, 2, 1, True)
    sliced = big.take(np.arange(0, 50, 3))  # taken rows
    strided = Batch(**{**big.__dict__, "attrs": np.asfortranarray(big.attrs)})  # not C order
    pairs = PairBatch(np.arange(4), np.arange(4) + 9, np.arange(4) * 7)
    msgs = [sliced, strided, pairs, PairBatch.empty(), Drain(), {"cmd": ("x", big)}]
    body = channels.payload(pairs)
    frames = [channels.frame(f"p{i}", channels.payload(m)) for i, m in enumerate(msgs)]
    frames.append(channels.frame("again", body))  # one payload, framed for a second edge
    channels.send(a, frames + [channels.end_frame()])
    got = [channels.recv(b) for _ in range(len(frames))]
    assert [p for p, _ in got] == [f"p{i}" for i in range(len(msgs))] + ["again"]
    assert _same_batch(sliced, got[0][1]) and _same_batch(strided, got[1][1])
    for k in (2, 6):
        assert all(
            np.array_equal(getattr(got[k][1], c), getattr(pairs, c))
            for c in ("r", "s", "ingest_ns")
        )
    assert len(got[3][1]) == 0 and isinstance(got[4][1], Drain)
    assert _same_batch(big, got[5][1]["cmd"][1])
    assert channels.recv(b) is channels.END


def test_a_connection_closed_before_the_end_frame_raises(pair):
    a, b = pair
    frame = channels.frame("in", channels.payload(_batch(1000, 1, 2, True)))
    channels.send(a, [frame])
    a.sendall(frame[0])  # half a frame: the header only
    a.close()
    assert channels.recv(b)[0] == "in"
    with pytest.raises(channels.ChannelClosed, match="middle of a frame"):
        channels.recv(b)


def test_connect_names_the_sender():
    server = channels.listen("127.0.0.1")
    try:
        out = channels.connect(server.getsockname()[:2], "core1_0")
        sock, sender = channels.accept(server)
        assert sender == "core1_0"
        out.close()
        with pytest.raises(channels.ChannelClosed, match="before ending the edge"):
            channels.recv(sock)
        sock.close()
    finally:
        server.close()
