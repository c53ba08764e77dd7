"""What the ``ray`` executor's channels cost per frame and per edge (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_channels.py --benchmark-enable -o addopts=""
-p no:cacheprovider``.

- *frames*: one message encoded, framed, written into a socket pair and read back, in one
  thread; the typed frames of :mod:`streamjoin.runtime.ray.wire` beside pickle (protocol 5, the
  arrays out of band), the alternative they replaced for everything but batches and pairs;
- *edges*: opening one edge on loopback with the mutual HMAC handshake (the receiver in an
  :class:`~streamjoin.runtime.ray.channels.Acceptor` thread, as a host takes its edges) beside a
  plain TCP connect and accept.
"""

import pickle
import socket
import struct

import numpy as np
import pytest

from streamjoin.actors.handshake import Ack
from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.batch import Batch, PairBatch
from streamjoin.runtime.ray import channels


def _batch(n: int) -> Batch:
    z = np.arange(n, dtype=np.int64)
    return Batch(z, (z % 2).astype(np.int8), z, z, z, z, np.zeros((1, n)))


def _command(n: int) -> WorkerCommand:
    """A PanJoin worker's command: probe three subwindows per stream, insert both streams."""
    b = _batch(n)
    inserts = [(7, np.flatnonzero(b.stream == 0)), (8, np.flatnonzero(b.stream == 1))]
    return WorkerCommand(b, [7], [(0, [1, 3, 5]), (1, [2, 4, 6])], inserts, [0])


MESSAGES = {
    "Batch-1": _batch(1),
    "Batch-1024": _batch(1024),
    "PairBatch-1024": PairBatch(*np.arange(3072).reshape(3, 1024)),
    "Ack": Ack(5),
    "WorkerCommand-1": _command(2),
    "WorkerCommand-1024": _command(1024),
}


def _send_pickled(sock: socket.socket, message) -> None:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    head = struct.pack(f"<Q{len(raws) + 1}Q", len(raws), len(data), *(r.nbytes for r in raws))
    sock.sendmsg([head, data, *raws])


def _recv_exact(sock: socket.socket, n: int) -> memoryview:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        got += sock.recv_into(view[got:])
    return view.toreadonly()


def _recv_pickled(sock: socket.socket):
    (n_raws,) = struct.unpack("<Q", _recv_exact(sock, 8))
    sizes = struct.unpack(f"<{n_raws + 1}Q", _recv_exact(sock, 8 * (n_raws + 1)))
    body = _recv_exact(sock, sum(sizes))
    offsets = np.cumsum([0, *sizes])
    pieces = [body[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    return pickle.loads(pieces[0], buffers=pieces[1:])


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("encoding", ["typed", "pickle"])
@pytest.mark.parametrize("message", list(MESSAGES))
def test_frame_round_trip(benchmark, pair, message, encoding):
    a, b = pair
    msg = MESSAGES[message]
    if encoding == "typed":

        def once():
            channels.send(a, [channels.frame("w0", channels.payload(msg))])
            return channels.recv(b)
    else:

        def once():
            _send_pickled(a, msg)
            return _recv_pickled(b)

    benchmark(once)


@pytest.mark.parametrize("how", ["authenticated", "plain"])
def test_edge_setup(benchmark, how):
    secret = channels.new_secret()
    server = channels.listen("127.0.0.1")
    address = server.getsockname()[:2]

    def authenticated():
        acceptor = channels.Acceptor(server, secret, ["emitter"])
        out = channels.connect(address, "emitter", secret)
        acceptor.result()["emitter"].close()
        out.close()

    def plain():
        out = socket.create_connection(address)
        server.accept()[0].close()
        out.close()

    try:
        benchmark(authenticated if how == "authenticated" else plain)
    finally:
        server.close()
