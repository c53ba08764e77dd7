"""A machine on the path of an edge, in a real Ray run: a relay between two actors that alters,
writes in, replays, reorders, drops or delays the frames of one edge. Every change ends the
run with an error that names the edge, within a few seconds of the change, and never a short
or padded result; a delay changes nothing.

The relay stands in front of the receiving actor (``executor.on_listen`` puts its address in
for the actor's), passes every handshake through untouched and reads the frames after it
record by record, as anyone on the network between two nodes could.
"""

import os
import socket
import struct
import threading
import time

import pytest
from records import sealed

import streamjoin as sj
from streamjoin.runtime.ray import channels, sealing, wire
from streamjoin.runtime.ray.executor import ActorFailed

#: the hello a sender opens with (channels module docstring): its last byte is the name length
HELLO_BYTES = struct.calcsize("<4sBB32sB")
MAC_BYTES = 32


def _exact(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            raise EOFError
        got += chunk
    return bytes(got)


def _forged_record(number: int) -> bytes:
    """A well-formed sealed record, numbered as the frame it stands in for, under a key that
    is not the edge's (all anyone without the run's secret can make)."""
    sealer = sealing.Sealer(os.urandom(32))
    sealer.next = number
    pairs = sj.batch.PairBatch.empty()
    return sealed(sealer, [channels.frame("in", channels.payload(pairs))])


def _plain_end() -> bytes:
    return b"".join(channels.end_frame())


def _plain_pairs() -> bytes:
    import numpy as np

    z = np.arange(2, dtype=np.int64)
    pieces = channels.frame("in", channels.payload(sj.batch.PairBatch(z, z, z)))
    return b"".join(bytes(memoryview(p).cast("B")) for p in pieces)


class Relay:
    """Listens in front of ``target``; forwards each connection to it, and on the edge from
    ``sender`` does ``action`` to the frame numbered ``at``: ``alter`` (one bit of it),
    ``inject`` (a record of its own before it), ``replay`` (it twice), ``reorder`` (it after
    the next one), ``drop`` (it), ``drop_rest`` (it and everything after), ``delay`` (it, by
    0.3 s); on a plain edge also ``end`` (an end frame before it), ``pairs`` (two pairs
    of its own before it), ``port`` (its port renamed) and ``kind`` (its kind made one
    that does not exist). ``touched`` is when it did."""

    def __init__(self, target, sender: str, action: str, at: int, sealed: bool = True) -> None:
        self.target, self.sender, self.action, self.at, self.sealed = (
            target,
            sender,
            action,
            at,
            sealed,
        )
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()[:2]
        self.touched: float | None = None
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.server.accept()
                up = socket.create_connection(self.target)
            except OSError:
                return
            self.sockets += [down, up]
            threading.Thread(target=self._copy, args=(up, down), daemon=True).start()
            threading.Thread(target=self._forth, args=(down, up), daemon=True).start()

    @staticmethod
    def _copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass

    def _record(self, src: socket.socket) -> bytes:
        if self.sealed:
            head = _exact(src, sealing.HEAD_BYTES)
            return head + _exact(src, sealing.HEAD.unpack(head[: sealing.HEAD.size])[1])
        head = _exact(src, wire.HEAD.size)
        n_name, _, n_meta, size = wire.HEAD.unpack(head)
        return head + _exact(src, n_name + n_meta + size)

    def _forth(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            hello = _exact(src, HELLO_BYTES)
            name = _exact(src, hello[-1])
            dst.sendall(hello + name)
            dst.sendall(_exact(src, MAC_BYTES))  # the answer to the listener's challenge
            mine = name.decode() == self.sender
            n, later = 0, b""
            while True:
                record = self._record(src)
                if mine and n == self.at:
                    self.touched = time.monotonic()
                    record, later = self._touch(record)
                elif later:
                    record, later = record + later, b""
                if mine and self.action == "drop_rest" and n >= self.at:
                    record = b""
                dst.sendall(record)
                n += 1
        except (OSError, EOFError):
            pass

    def _touch(self, record: bytes) -> tuple[bytes, bytes]:
        """What to send for the frame ``at``, and what to send after the next one."""
        action = self.action
        if action in ("port", "kind"):  # a plain frame's port name, or its kind, rewritten
            n_name, kind, n_meta, size = wire.HEAD.unpack(record[: wire.HEAD.size])
            if action == "kind":
                return wire.HEAD.pack(n_name, 250, n_meta, size) + record[wire.HEAD.size :], b""
            at = wire.HEAD.size
            return record[:at] + b"z" * n_name + record[at + n_name :], b""
        if action == "alter":
            return record[:-30] + bytes([record[-30] ^ 1]) + record[-29:], b""
        if action == "delay":
            time.sleep(0.3)
        added = {
            "inject": lambda: _forged_record(self.at),
            "end": _plain_end,
            "pairs": _plain_pairs,
            "replay": lambda: record,
        }
        if action in added:
            return added[action]() + record, b""
        if action == "reorder":
            return b"", record
        if action in ("drop", "drop_rest"):
            return b"", b""
        return record, b""

    def close(self) -> None:
        self.server.close()
        for sock in self.sockets:
            sock.close()


LAYOUTS = {
    "split": lambda: sj.topologies.split(2),
    "grid": lambda: sj.topologies.grid(2, 2),
    "panjoin": lambda: sj.topologies.panjoin(2, 4),
    "handshake": lambda: sj.topologies.handshake(2, segment=4),
}
QUERY = sj.Query(sj.band("x", 2), window=sj.CountWindow(300, 200))
DATA = sj.sources.synthetic(4000, low=0, high=2000, seed=5)


def _run_through(monkeypatch, layout: str, relay_args: tuple, relays: list, **options):
    """Run ``layout`` over ``DATA`` with a :class:`Relay` (appended to ``relays``) in front of
    the receiver of ``relay_args``."""
    from streamjoin.runtime.ray import executor

    sender, receiver, action, at = relay_args
    options.setdefault("encrypt_edges", True)  # (a run on one machine seals only if asked)
    sealed = options["encrypt_edges"]

    def on_listen(addresses):
        relays.append(Relay(addresses[receiver], sender, action, at, sealed))
        addresses[receiver] = relays[-1].address

    monkeypatch.setattr(executor, "on_listen", on_listen)
    return sj.run(
        QUERY, DATA, LAYOUTS[layout](), backend="ray", batch_size=32, pace=8000, **options
    )


@pytest.fixture
def relays():
    out: list[Relay] = []
    yield out
    for relay in out:
        relay.close()


def _seconds_to_error(relays: list) -> float:
    assert relays and relays[0].touched is not None, "the relay never touched a frame"
    return time.monotonic() - relays[0].touched


#: layout, (sender, receiver, what the relay does, at which frame), what the error says; the
#: channel tests check every kind of tampering without Ray, so a few run only with the slow ones
_SLOW = pytest.mark.slow
TAMPERING = [
    ("split", ("emitter", "core0", "alter", 5), "frame 5 does not authenticate"),
    pytest.param(
        "split",
        ("core1", "collector", "inject", 4),
        "frame 4's head does not authenticate",
        marks=_SLOW,
    ),
    pytest.param(
        "grid",
        ("core0_0", "core0_1", "replay", 5),
        "frame 5 came again where frame 6 belongs",
        marks=_SLOW,
    ),
    ("grid", ("emitter", "core1_0", "reorder", 5), "frame 6 came where frame 5 belongs"),
    pytest.param(
        "panjoin",
        ("manager", "worker1", "drop", 5),
        "frame 6 came where frame 5 belongs",
        marks=_SLOW,
    ),
    ("handshake", ("core0", "core1", "alter", 5), "frame 5 does not authenticate"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("layout", "relay", "says"), TAMPERING, ids=lambda v: str(v)[:30])
def test_tampering_on_an_edge_ends_a_ray_run_naming_the_edge(
    ray_session, monkeypatch, relays, layout, relay, says
):
    sender, receiver, _, _ = relay
    with pytest.raises(ActorFailed) as failed:
        _run_through(monkeypatch, layout, relay, relays)
    took = _seconds_to_error(relays)
    message = str(failed.value)
    assert f"actor {receiver!r}" in message and f"its edge from {sender!r}" in message, message
    assert says in message, message
    assert took < 5, took  # within a second on an idle machine


@pytest.mark.timeout(120)
def test_frames_lost_at_the_end_of_an_edge_end_the_run_naming_the_edge(
    ray_session, monkeypatch, relays
):
    """Everything from frame 3 on, the end frame included, dropped on the way: no later frame
    shows a gap, the receiver would wait for ever; the driver's audit ends the run."""
    with pytest.raises(ActorFailed, match="the edge from 'core0' to 'collector' lost frames"):
        _run_through(monkeypatch, "split", ("core0", "collector", "drop_rest", 3), relays)
    assert _seconds_to_error(relays) < 10


@pytest.mark.timeout(120)
def test_a_delayed_frame_changes_nothing(ray_session, monkeypatch, relays):
    result = _run_through(monkeypatch, "grid", ("emitter", "core0_0", "delay", 5), relays)
    assert relays[0].touched is not None
    assert result.same_pairs(sj.oracle.join(QUERY, DATA))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("relay", "says"),
    [
        (  # the premature end frame: the core ends early, a short result unless caught
            # (under load the driver may first see the frames the edge then lost)
            ("emitter", "core0", "end", 5),
            "ended before the emitter ended its input|a frame after the end of the edge"
            "|the edge from 'emitter' to 'core0' lost frames",
        ),
        (  # two pairs the core never found
            ("core1", "collector", "pairs", 3),
            "the edge from 'core1' to 'collector' delivered .* more than 'core1' sent",
        ),
        (  # a batch for a port the edge does not feed
            ("emitter", "core0", "port", 4),
            "actor 'core0' .* on its edge from 'emitter', a frame for port 'z+', which that",
        ),
        pytest.param(  # a frame of a kind no frame has (the channel tests cover every kind)
            ("core0", "collector", "kind", 3),
            "actor 'collector' .* on its edge from 'core0', .*unknown message kind 250",
            marks=_SLOW,
        ),
    ],
    ids=["end", "pairs", "port", "kind"],
)
def test_unsealed_edges_still_never_return_a_short_or_padded_result(
    ray_session, monkeypatch, relays, relay, says
):
    """With ``encrypt_edges=False`` (a trusted network) an end frame or pairs written into an
    edge still end the run, by the driver's checks, instead of ending it short or padded."""
    with pytest.raises(ActorFailed, match=says):
        _run_through(monkeypatch, "split", relay, relays, encrypt_edges=False)
