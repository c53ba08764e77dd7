"""What crosses an edge of the ``ray`` executor, byte by byte: the frame, and one typed encoding
per kind of message the actors exchange (:mod:`streamjoin.runtime.ray.channels` moves the frames).

A frame carries one ``(port, message)``::

    head  <HBIQ   port-name length, kind, metadata length, body length     (15 bytes)
    port          the destination port's name, utf-8, at most MAX_PORT_BYTES
    meta          the kind's fixed struct of counts and scalars, at most MAX_META_BYTES
    body          the kind's arrays, raw little-endian columns, 8-byte columns first and
                  ``int8`` ones last, so every view is aligned; at most MAX_BODY_BYTES

Kind 0 ends the edge (:data:`END`, every length 0). An edge that seals its frames
(:mod:`~streamjoin.runtime.ray.sealing`) seals each frame with zero bytes after its metadata up
to a multiple of 8 (:func:`padded`), so that its body is aligned in the opened plaintext too
(:func:`read_padded`). Every other kind is a :class:`Codec` in a
registry by kind number and by message type; a new message type gets one with
:func:`register`. Nothing is unpickled: a receiver builds each message from its columns, as
read-only views of the received bytes (as arrays arriving through Ray's object store are:
numba compiles read-only and writable arguments separately and the actors' kernels are warmed
for the former). Every length and count a frame states is checked against the bytes it has
and against the bounds above before anything is allocated or viewed; a kind nobody
registered, a count that does not add up or bytes left over are a :class:`FramingError`.

========  ===========================  ==================================================
kind      message                      meta; body
========  ===========================  ==================================================
1         :class:`Batch`               n, k, store, horizon R, horizon S; ``seq idx ts
                                       ingest_ns lo_idx`` (int64, n each), ``attrs``
                                       (float64, k × n), ``stream`` (int8, n)
2         :class:`PairBatch`           n; ``r s ingest_ns`` (int64, n each)
3         :class:`Drain`               —; —
4         :class:`Ack`                 upto; —
5         :class:`WorkerCommand`       a batch's meta, index length, positions length;
                                       index (int64), positions (int64), the batch's body
6         ``Progress``                 r, s; — (registered by
                                       :mod:`~streamjoin.runtime.ray.recovery`)
7         :class:`MergedRun`           piece, stream, a batch's meta; ``a_order``,
                                       ``b_order`` (int64, n each), the batch's body
8         :class:`SubtreePairs`        batch (-1: extra), n; ``r s ingest_ns`` (int64, n each)
========  ===========================  ==================================================
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamjoin.actors.handshake import Ack
from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.actors.router import Drain
from streamjoin.actors.spo import EXTRA, MergedRun, SubtreePairs
from streamjoin.batch import Batch, Marker, PairBatch

#: a frame's head: port-name length, kind, metadata length, body length
HEAD = struct.Struct("<HBIQ")
#: the kind of the frame that ends an edge
END_KIND = 0
#: what :func:`read` returns for the frame that ends an edge
END = object()
MAX_PORT_BYTES = 255
MAX_META_BYTES = 4096
#: a bound on one frame's body (a batch of ~80 M tuples with one attribute): sane, not tight;
#: the receiver's buffer grows with the bytes that arrive, not with the length a head states
MAX_BODY_BYTES = 1 << 32
#: join attributes of a batch, at most
MAX_ATTRS = 1024
I64, F64, I8 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.int8)


class ProtocolError(ConnectionError):
    """The other end of an edge broke its protocol: a frame that cannot be, or cannot be there."""


class FramingError(ProtocolError):
    """The peer sent bytes that are not a frame this end can read."""


class Body:
    """A received body, read front to back; every read is checked against what is left."""

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.at = 0

    def array(self, dtype: np.dtype, count: int) -> np.ndarray:
        """The next ``count`` items of ``dtype`` (an ``np.dtype``), as a read-only view."""
        nbytes = count * dtype.itemsize
        if count < 0 or nbytes > len(self.view) - self.at:
            raise FramingError(
                f"a body of {len(self.view)} bytes has no {count} × {dtype} at byte {self.at}"
            )
        out = np.frombuffer(self.view, dtype, count, self.at)
        self.at += nbytes
        return out

    def end(self) -> None:
        if self.at != len(self.view):
            raise FramingError(f"{len(self.view) - self.at} bytes left over after the message")


@dataclass(frozen=True)
class Codec:
    """How messages of type ``cls`` travel, as frames of kind ``kind`` (1–255).

    ``encode(message) -> (meta, pieces)``: the metadata (bytes) and the body as buffers sent
    one after another without a copy. ``decode(meta, body) -> message`` from a :class:`Body`
    it must read to the end; it raises :class:`FramingError` for anything inconsistent.
    """

    kind: int
    cls: type
    encode: Callable[[Any], tuple[bytes, list]]
    decode: Callable[[bytes, Body], Any]


_BY_KIND: dict[int, Codec] = {}
_BY_TYPE: dict[type, Codec] = {}


def register(codec: Codec) -> Codec:
    """Add ``codec`` to the registry; its kind and its type must be new."""
    if not 0 < codec.kind < 256:
        raise ValueError(f"a message kind is 1–255, got {codec.kind}")
    if codec.kind in _BY_KIND or codec.cls in _BY_TYPE:
        raise ValueError(f"kind {codec.kind} or type {codec.cls.__name__} already has a codec")
    _BY_KIND[codec.kind] = _BY_TYPE[codec.cls] = codec
    return codec


def unpack(fmt: struct.Struct, meta: bytes) -> tuple:
    """``meta`` as ``fmt``; its length must be exactly ``fmt.size``."""
    if len(meta) != fmt.size:
        raise FramingError(f"metadata of {len(meta)} bytes where {fmt.size} belong")
    return fmt.unpack(meta)


# -- frames -----------------------------------------------------------------------------------


def payload(message) -> tuple[int, bytes, list]:
    """``(kind, metadata, body pieces)`` of ``message``: encode it once, then :func:`frame` it
    for every edge it leaves on."""
    codec = _BY_TYPE.get(type(message))
    if codec is None:
        raise TypeError(
            f"no wire encoding for {type(message).__name__}: give it a Codec "
            "(streamjoin.runtime.ray.wire.register)"
        )
    meta, pieces = codec.encode(message)
    return codec.kind, meta, pieces


def frame(port: str, body: tuple) -> list:
    """The pieces of one frame carrying ``body`` (from :func:`payload`) to ``port``."""
    kind, meta, pieces = body
    name = port.encode()
    size = sum(memoryview(p).nbytes for p in pieces)
    if not 0 < len(name) <= MAX_PORT_BYTES:
        raise ValueError(f"a port name is 1–{MAX_PORT_BYTES} utf-8 bytes, got {port!r}")
    if size > MAX_BODY_BYTES:
        raise ValueError(f"a message of {size} bytes exceeds the frame limit {MAX_BODY_BYTES}")
    return [HEAD.pack(len(name), kind, len(meta), size) + name + meta, *pieces]


def end_frame() -> list:
    """The pieces of the frame that ends an edge."""
    return [HEAD.pack(0, END_KIND, 0, 0)]


def read_head(head: bytes) -> tuple[int, int, int, int]:
    """``(port-name length, kind, metadata length, body length)`` of a frame's head, each
    checked against the bounds and the kind's registry before the receiver reads further."""
    n_name, kind, n_meta, size = HEAD.unpack(head)
    if kind == END_KIND:
        if n_name or n_meta or size:
            raise FramingError("an end frame with a port, metadata or body")
        return n_name, kind, n_meta, size
    if kind not in _BY_KIND:
        raise FramingError(f"unknown message kind {kind}")
    if not 0 < n_name <= MAX_PORT_BYTES:
        raise FramingError(f"a port name of {n_name} bytes (1–{MAX_PORT_BYTES})")
    if n_meta > MAX_META_BYTES:
        raise FramingError(f"metadata of {n_meta} bytes (at most {MAX_META_BYTES})")
    if size > MAX_BODY_BYTES:
        raise FramingError(f"a body of {size} bytes (at most {MAX_BODY_BYTES})")
    return n_name, kind, n_meta, size


def _pad(n: int) -> int:
    return -n % 8


def padded(pieces: list) -> list:
    """The pieces of a frame (from :func:`frame` or :func:`end_frame`) with zero bytes after its
    metadata up to a multiple of 8: its body starts aligned where the frame starts aligned."""
    head = pieces[0]
    return [head + bytes(_pad(len(head))), *pieces[1:]]


def read_padded(data):
    """``(port, message)`` or :data:`END` from one whole :func:`padded` frame, whose body is
    read as read-only views of ``data``; anything inconsistent is a :class:`FramingError`."""
    if len(data) < HEAD.size:
        raise FramingError(f"a frame of {len(data)} bytes, shorter than its head")
    n_name, kind, n_meta, size = read_head(data[: HEAD.size])
    at = HEAD.size + n_name + n_meta
    start = at + _pad(at)
    if len(data) != start + size or any(data[at:start]):
        raise FramingError(
            f"a frame of {len(data)} bytes whose head states {start + size} (padding included)"
        )
    if kind == END_KIND:
        return END
    body = memoryview(data)[start:].toreadonly()
    return read(kind, bytes(data[HEAD.size : at]), n_name, body)


def read(kind: int, port_meta: bytes, n_name: int, body: memoryview) -> tuple[str, object]:
    """``(port, message)`` of a frame of ``kind`` (checked by :func:`read_head`) whose port
    name and metadata are ``port_meta`` and whose body is ``body`` (read-only)."""
    try:
        port = port_meta[:n_name].decode()
    except UnicodeDecodeError:
        raise FramingError("a port name that is not utf-8") from None
    reader = Body(body)
    message = _BY_KIND[kind].decode(port_meta[n_name:], reader)
    reader.end()
    return port, message


# -- the actors' messages ---------------------------------------------------------------------


def _column(a: np.ndarray, dtype):
    if a.dtype != dtype or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=dtype)
    return a.data.cast("B") if a.size else b""


#: a batch's metadata: tuples, join attributes, store flag, horizon of R and of S
_BATCH_META = "QIBqq"
_BATCH = struct.Struct("<" + _BATCH_META)
#: a batch's int64 columns, in body order; then ``attrs`` (float64, k × n), then ``stream``
_BATCH_INTS = ("seq", "idx", "ts", "ingest_ns", "lo_idx")


def _batch_fields(b: Batch) -> tuple:
    return len(b), b.attrs.shape[0], b.store, int(b.horizon[0]), int(b.horizon[1])


def _batch_pieces(b: Batch) -> list:
    body = [_column(getattr(b, c), np.int64) for c in _BATCH_INTS]
    return body + [_column(b.attrs, np.float64), _column(b.stream, np.int8)]


def _read_batch(fields: tuple, body: Body) -> Batch:
    n, k, store, h0, h1 = fields
    if k > MAX_ATTRS or store > 1:
        raise FramingError(f"a batch with {k} attributes and store flag {store}")
    ints = body.array(I64, 5 * n).reshape(5, n)
    attrs = body.array(F64, k * n).reshape(k, n)
    stream = body.array(I8, n)
    return Batch(
        **dict(zip(_BATCH_INTS, ints, strict=True)),
        stream=stream,
        attrs=attrs,
        horizon=np.array([h0, h1], dtype=np.int64),
        store=bool(store),
    )


def _encode_batch(b: Batch) -> tuple[bytes, list]:
    return _BATCH.pack(*_batch_fields(b)), _batch_pieces(b)


def _decode_batch(meta: bytes, body: Body) -> Batch:
    return _read_batch(unpack(_BATCH, meta), body)


_PAIR_COLS = ("r", "s", "ingest_ns")
_COUNT = struct.Struct("<Q")


def _encode_pairs(p: PairBatch) -> tuple[bytes, list]:
    return _COUNT.pack(len(p)), [_column(getattr(p, c), np.int64) for c in _PAIR_COLS]


def _decode_pairs(meta: bytes, body: Body) -> PairBatch:
    (n,) = unpack(_COUNT, meta)
    return PairBatch(*body.array(I64, 3 * n).reshape(3, n))


_EMPTY = struct.Struct("<")


def _encode_drain(d: Drain) -> tuple[bytes, list]:
    return b"", []


def _decode_drain(meta: bytes, body: Body) -> Drain:
    unpack(_EMPTY, meta)
    return Drain()


_ACK = struct.Struct("<q")


def _encode_ack(a: Ack) -> tuple[bytes, list]:
    return _ACK.pack(a.upto), []


def _decode_ack(meta: bytes, body: Body) -> Ack:
    return Ack(*unpack(_ACK, meta))


#: a command's metadata: its batch's, then the lengths of its index and of its positions
_COMMAND = struct.Struct("<" + _BATCH_META + "QQ")


def _encode_command(c: WorkerCommand) -> tuple[bytes, list]:
    """The index lists ``create``, ``expire``, ``probe`` as ``(x, subwindows)`` and
    ``insert`` as ``(subwindow, number of positions)``, each list after its length; the
    positions of every insert follow it, one after another."""
    items = [len(c.create), *c.create, len(c.expire), *c.expire, len(c.probe)]
    for x, subs in c.probe:
        items += [x, len(subs), *subs]
    items.append(len(c.insert))
    for sub, pos in c.insert:
        items += [sub, len(pos)]
    index = np.array(items, dtype=np.int64)
    positions = [_column(pos, np.int64) for _, pos in c.insert]
    n_pos = sum(len(pos) for _, pos in c.insert)
    meta = _COMMAND.pack(*_batch_fields(c.batch), len(index), n_pos)
    return meta, [_column(index, np.int64), *positions, *_batch_pieces(c.batch)]


class _Index:
    """A command's index read front to back; every count is checked against what is left."""

    def __init__(self, index: np.ndarray) -> None:
        self.items = index.tolist()
        self.at = 0

    def one(self) -> int:
        if self.at >= len(self.items):
            raise FramingError("a worker command's index ends early")
        self.at += 1
        return self.items[self.at - 1]

    def count(self, width: int = 1) -> int:
        n = self.one()
        if not 0 <= n * width <= len(self.items) - self.at:
            raise FramingError(f"a worker command's index lists {n} entries it has no room for")
        return n

    def run(self) -> list[int]:
        n = self.count()
        self.at += n
        return self.items[self.at - n : self.at]


def _decode_command(meta: bytes, body: Body) -> WorkerCommand:
    *fields, n_index, n_pos = unpack(_COMMAND, meta)
    index = _Index(body.array(I64, n_index))
    positions = body.array(I64, n_pos)
    batch = _read_batch(tuple(fields), body)
    create, expire = index.run(), index.run()
    probe = []
    for _ in range(index.count(2)):
        x = index.one()
        if x not in (0, 1):
            raise FramingError(f"a worker command probes stream {x}")
        probe.append((x, index.run()))
    insert, at = [], 0
    for _ in range(index.count(2)):
        sub, m = index.one(), index.one()
        pos = positions[at : at + m]
        if m <= 0 or at + m > n_pos or pos.min() < 0 or pos.max() >= len(batch):
            raise FramingError(
                f"a worker command inserts positions out of its batch of {len(batch)}"
            )
        insert.append((sub, pos))
        at += m
    if index.at != len(index.items) or at != n_pos:
        raise FramingError("a worker command's index or positions have entries left over")
    return WorkerCommand(batch, create, probe, insert, expire)


#: a merged piece's metadata: piece number, stream, then its rows' batch meta
_MERGED = struct.Struct("<QB" + _BATCH_META)


def _encode_merged(m: MergedRun) -> tuple[bytes, list]:
    orders = [_column(m.a_order, np.int64), _column(m.b_order, np.int64)]
    return _MERGED.pack(m.piece, m.stream, *_batch_fields(m.rows)), orders + _batch_pieces(m.rows)


def _decode_merged(meta: bytes, body: Body) -> MergedRun:
    piece, stream, *fields = unpack(_MERGED, meta)
    n = fields[0]
    if stream > 1:
        raise FramingError(f"a merged piece of stream {stream}")
    orders = body.array(I64, 2 * n).reshape(2, n)
    rows = _read_batch(tuple(fields), body)
    for order in orders:
        if n and (order.min() < 0 or order.max() >= n):
            raise FramingError(f"a merged piece orders positions out of its {n} rows")
    return MergedRun(piece, stream, rows, orders[0], orders[1])


_MARKER = struct.Struct("<qqqq")


def _encode_marker(m: Marker) -> tuple[bytes, list]:
    return _MARKER.pack(m.number, m.kept, m.low, m.reach), []


def _decode_marker(meta: bytes, body: Body) -> Marker:
    number, kept, low, reach = unpack(_MARKER, meta)
    if number < 1 or min(kept, low, reach) < 0:
        raise FramingError(
            f"a progress marker numbered {number}, after {kept} kept rows, from rows "
            f"{low} and {reach}"
        )
    return Marker(number, kept, low, reach)


#: a subtree's report: its batch number, then its pairs' count
_SUBTREE = struct.Struct("<qQ")


def _encode_subtree(m: SubtreePairs) -> tuple[bytes, list]:
    _, pieces = _encode_pairs(m.pairs)
    return _SUBTREE.pack(m.batch, len(m.pairs)), pieces


def _decode_subtree(meta: bytes, body: Body) -> SubtreePairs:
    batch, n = unpack(_SUBTREE, meta)
    if batch < EXTRA:
        raise FramingError(f"a subtree's report names batch {batch}")
    return SubtreePairs(batch, PairBatch(*body.array(I64, 3 * n).reshape(3, n)))


register(Codec(1, Batch, _encode_batch, _decode_batch))
register(Codec(2, PairBatch, _encode_pairs, _decode_pairs))
register(Codec(3, Drain, _encode_drain, _decode_drain))
register(Codec(4, Ack, _encode_ack, _decode_ack))
register(Codec(5, WorkerCommand, _encode_command, _decode_command))
register(Codec(7, MergedRun, _encode_merged, _decode_merged))
register(Codec(8, SubtreePairs, _encode_subtree, _decode_subtree))
register(Codec(9, Marker, _encode_marker, _decode_marker))
