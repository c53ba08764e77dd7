"""Framed message channels between actors: one TCP connection per graph edge.

The ``ray`` executor keeps Ray for placing actors, starting and stopping them and reporting
their failures, and passes the batches themselves over these connections: a Ray actor call
costs about 1–2 ms of this machine's two cores, a frame on a socket tens of microseconds.

A frame carries one ``(port, message)``: a header (port name, kind, sizes) and a body, written
with one ``sendmsg`` and no copy of the arrays on the sending side. :class:`Batch` and
:class:`PairBatch` — almost every message — travel as their raw columns, which the receiver
views in place (read-only, as arrays arriving through Ray's object store are: numba compiles
read-only and writable arguments separately and the actors' kernels are warmed for the
former). Anything else is pickled (protocol 5, numpy buffers out of band). A frame of kind
``_END`` ends the edge (:data:`END`).

TCP delivers each connection's bytes in order, so every edge is FIFO; a sender whose
receiver stops reading blocks once the socket buffers (``BUFFER_BYTES`` each end) are full,
which is the backpressure.
A connection that closes without :data:`END` raises :class:`ChannelClosed`.
"""

from __future__ import annotations

import pickle
import socket
import struct

import numpy as np

from streamjoin.batch import Batch, PairBatch

#: header: port-name length, message kind, length of the kind's metadata, length of the body
_HEAD = struct.Struct("<HBIQ")
_END, _PICKLE, _BATCH, _PAIRS = range(4)
#: a batch's metadata: tuples, join attributes, store flag, horizon of R and of S
_BATCH_META = struct.Struct("<QIBqq")
#: a batch's int64 columns, in body order; then ``attrs`` (float64, k × n), then ``stream``
_BATCH_INTS = ("seq", "idx", "ts", "ingest_ns", "lo_idx")
_PAIR_COLS = ("r", "s", "ingest_ns")
#: the frame that ends an edge
END = object()
#: socket send and receive buffer per edge end (see :func:`_small_buffers`)
BUFFER_BYTES = 256 * 1024


class ChannelClosed(ConnectionError):
    """The other end of a channel went away before ending it."""


def listen(host: str) -> socket.socket:
    """A socket accepting this actor's incoming edges on ``host`` (any free port)."""
    return socket.create_server((host, 0), backlog=256)


def connect(address: tuple[str, int], sender: str) -> socket.socket:
    """Open an edge to the actor listening at ``address``; the first frame names the sender."""
    sock = socket.create_connection(address)
    _small_buffers(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    send(sock, [frame("hello", payload(sender))])
    return sock


def _small_buffers(sock: socket.socket) -> None:
    """Kernel buffers of ``BUFFER_BYTES``: a sender blocks sooner, so the streams of a
    handshake chain skew less (2x its throughput here; Linux's loopback default lets a
    sender run megabytes ahead)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)


def accept(server: socket.socket) -> tuple[socket.socket, str]:
    """The next incoming edge and the name of the actor sending on it."""
    sock, _ = server.accept()
    _small_buffers(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _, sender = recv(sock)
    return sock, sender


def _column(a: np.ndarray, dtype):
    if a.dtype != dtype or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=dtype)
    return a.data.cast("B") if a.size else b""


def payload(message) -> tuple:
    """``(kind, metadata, body pieces)`` of ``message``: encode it once, then :func:`frame`
    it for every edge it leaves on."""
    if type(message) is Batch:
        n, k = len(message), message.attrs.shape[0]
        h = message.horizon
        meta = _BATCH_META.pack(n, k, message.store, int(h[0]), int(h[1]))
        body = [_column(getattr(message, c), np.int64) for c in _BATCH_INTS]
        body += [_column(message.attrs, np.float64), _column(message.stream, np.int8)]
        return _BATCH, meta, body
    if type(message) is PairBatch:
        meta = struct.pack("<Q", len(message))
        return _PAIRS, meta, [_column(getattr(message, c), np.int64) for c in _PAIR_COLS]
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    meta = struct.pack(f"<Q{len(raws)}Q", len(data), *(r.nbytes for r in raws))
    return _PICKLE, meta, [data, *raws]


def frame(port: str, body: tuple) -> list:
    """The pieces of one frame carrying ``body`` (from :func:`payload`) to ``port``."""
    kind, meta, pieces = body
    name = port.encode()
    size = sum(memoryview(p).nbytes for p in pieces)
    return [_HEAD.pack(len(name), kind, len(meta), size) + name + meta, *pieces]


def end_frame() -> list:
    """The pieces of the frame that ends an edge."""
    return [_HEAD.pack(0, _END, 0, 0)]


def send(sock: socket.socket, frames: list[list]) -> None:
    """Write whole frames (each a list of pieces from :func:`frame`), blocking until the
    kernel took every byte."""
    views = [memoryview(p).cast("B") for f in frames for p in f]
    views = [v for v in views if v.nbytes]
    while views:
        n = sock.sendmsg(views[:512])
        while views and n >= views[0].nbytes:
            n -= views.pop(0).nbytes
        if n:
            views[0] = views[0][n:]


def recv(sock: socket.socket):
    """Read one frame: ``(port, message)``, or :data:`END`."""
    n_name, kind, n_meta, size = _HEAD.unpack(_recv_exact(sock, _HEAD.size, first=True))
    if kind == _END:
        return END
    both = bytes(_recv_exact(sock, n_name + n_meta))
    name, meta = both[:n_name].decode(), both[n_name:]
    body = memoryview(_recv_exact(sock, size)).toreadonly()
    if kind == _BATCH:
        n, k, store, h0, h1 = _BATCH_META.unpack(meta)
        ints = np.frombuffer(body, dtype=np.int64, count=(5 + k) * n)
        cols = dict(zip(_BATCH_INTS, ints[: 5 * n].reshape(5, n), strict=True))
        attrs = ints[5 * n :].view(np.float64).reshape(k, n)
        stream = np.frombuffer(body, dtype=np.int8, offset=8 * (5 + k) * n, count=n)
        horizon = np.array([h0, h1], dtype=np.int64)
        return name, Batch(**cols, stream=stream, attrs=attrs, horizon=horizon, store=bool(store))
    if kind == _PAIRS:
        (n,) = struct.unpack("<Q", meta)
        r, s, ingest = np.frombuffer(body, dtype=np.int64, count=3 * n).reshape(3, n)
        return name, PairBatch(r, s, ingest)
    n_data, *sizes = struct.unpack(f"<{len(meta) // 8}Q", meta)
    offsets = np.cumsum([n_data, *sizes])
    buffers = [body[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    return name, pickle.loads(body[:n_data], buffers=buffers)


def _recv_exact(sock: socket.socket, n: int, first: bool = False) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            where = "before ending the edge" if first and got == 0 else "in the middle of a frame"
            raise ChannelClosed(f"the sender closed the connection {where}")
        got += k
    return buf
