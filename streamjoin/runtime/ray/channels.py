"""Authenticated message channels between actors: one TCP connection per graph edge.

The ``ray`` executor keeps Ray for placing actors, starting and stopping them and reporting
their failures, and passes the batches themselves over these connections: a Ray actor call
costs about 1–2 ms of this machine's two cores, a frame on a socket tens of microseconds.

**Handshake.** Nothing but the handshake is read from a connection until both ends have shown
they hold the run's secret (:func:`new_secret`; the driver hands it to every actor through
Ray, whose own channel is authenticated). The sender, which connected, and the receiver,
which accepted, exchange (HMAC-SHA256 under the secret, as Python's
``multiprocessing.connection`` does with ``authkey``, but mutual)::

    1. sender   → receiver   hello: b"SJCH", version, mode M, nonce Ns (32 bytes), name
                             length, name
    2. receiver → sender     nonce Nr (32 bytes), HMAC(secret, b"accept"  ‖ M ‖ Ns ‖ Nr ‖ name)
    3. sender   → receiver   HMAC(secret, b"connect" ‖ M ‖ Ns ‖ Nr ‖ name)   if 2 verified
    4. receiver → sender     b"\\x01": the edge is taken   if 3 verified and ``name`` is an
                             expected sender not yet connected

Each side proves the secret over the other's fresh nonce, so a recorded handshake does not
replay, and the two MACs carry different labels, so neither can be reflected as the other.
MACs are compared in constant time. A sender streams nothing to a listener that fails step 2
(an impostor that took the port); a receiver closes and logs (one line: address, reason) a
connection that fails step 1 or 3, sends nothing within :data:`HANDSHAKE_TIMEOUT_S`, or names
a sender it does not expect or has already, or whose mode is not its own: such a connection
never takes an edge. The receiver authenticates every waiting connection at once
(:func:`accept_edges`), so an intruder that connects and stays silent holds up no sender.

**Mode.** M is 1 when the run seals its frames (the default): every frame after the handshake
is then encrypted, authenticated and numbered under a key of the edge's own
(:mod:`~streamjoin.runtime.ray.sealing`), so a machine on the path can neither read nor alter,
add, replay, reorder or drop one unnoticed. M is 0 on a network the operator trusts: frames then
travel in the clear, as written below. Both ends state their mode and prove it in their MACs,
so nobody on the path can talk an end out of sealing.

**Frames** (:mod:`streamjoin.runtime.ray.wire`) carry one ``(port, message)`` each, written with
one ``sendmsg`` (plain: with no copy of the arrays) and read back as read-only views of the
received bytes; only registered message kinds exist, nothing is unpickled. A frame of kind
``END`` ends the edge; a frame after it, a second one among them, is a :class:`ProtocolError`.

TCP delivers each connection's bytes in order, so every edge is FIFO; a sender whose
receiver stops reading blocks once the socket buffers (``BUFFER_BYTES`` each end) are full,
which is the backpressure. A connection that closes without :data:`END` raises
:class:`ChannelClosed`; bytes that are no frame raise :class:`FramingError`, a sealed record
that does not open in its place :class:`~streamjoin.runtime.ray.sealing.TamperedFrame` (both
are :class:`ProtocolError`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from streamjoin.runtime.coalesce import EDGE_BUFFER_BYTES
from streamjoin.runtime.ray import sealing, wire
from streamjoin.runtime.ray.sealing import TamperedFrame
from streamjoin.runtime.ray.wire import END, FramingError, ProtocolError, end_frame, frame, payload

__all__ = [
    "END",
    "Acceptor",
    "AuthenticationError",
    "Channel",
    "ChannelClosed",
    "FramingError",
    "ProtocolError",
    "TamperedFrame",
    "accept_edges",
    "connect",
    "end_frame",
    "frame",
    "listen",
    "new_secret",
    "payload",
    "recv",
    "send",
]

_log = logging.getLogger(__name__)

#: socket send and receive buffer per edge end (see :func:`_small_buffers`)
BUFFER_BYTES = EDGE_BUFFER_BYTES
#: seconds a receiver gives a connection to complete its handshake, from accepting it (a real
#: sender has sent its hello by then and answers the challenge at once)
HANDSHAKE_TIMEOUT_S = 10.0
#: seconds a sender waits for the receiver's answers: the receiver may still be starting
CONNECT_TIMEOUT_S = 30.0
#: connections a receiver authenticates at once; one more drops the oldest
MAX_PENDING = 64
#: a received frame's buffer starts this large and grows with the bytes that arrive
_FIRST_BYTES = 1 << 20

_MAGIC = b"SJCH"
_VERSION = 2
_NONCE_BYTES = 32
#: hello: magic, version, mode (1: sealed frames), sender's nonce, sender-name length (the name
#: follows)
_HELLO = struct.Struct("<4sBB32sB")
_MAC_BYTES = hashlib.sha256().digest_size
_TAKEN = b"\x01"


class ChannelClosed(ConnectionError):
    """The other end of a channel went away before ending it."""


class AuthenticationError(ConnectionError):
    """The other end of a connection did not prove it holds the run's secret, or refused it."""


def new_secret() -> bytes:
    """A fresh secret for one run's channels (256 random bits)."""
    return secrets.token_bytes(32)


def _check_secret(secret: bytes) -> None:
    if not isinstance(secret, bytes) or len(secret) < 16:
        raise ValueError("a channel secret is at least 16 bytes (use channels.new_secret())")


def _mac(secret: bytes, label: bytes, mode: int, ns: bytes, nr: bytes, name: bytes) -> bytes:
    return hmac.new(secret, label + bytes([mode]) + ns + nr + name, hashlib.sha256).digest()


def _mode_name(mode: int) -> str:
    return "sealed" if mode else "plain"


def listen(host: str) -> socket.socket:
    """A socket accepting this actor's incoming edges on ``host`` (any free port)."""
    return socket.create_server((host, 0), backlog=256)


def _small_buffers(sock: socket.socket) -> None:
    """Kernel buffers of ``BUFFER_BYTES``: a sender blocks sooner, so the streams of a
    handshake chain skew less (2x its throughput here; Linux's loopback default lets a
    sender run megabytes ahead)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)


def _edge_options(sock: socket.socket) -> None:
    _small_buffers(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# -- the sending end --------------------------------------------------------------------------


def connect(
    address: tuple[str, int],
    sender: str,
    secret: bytes,
    timeout: float = CONNECT_TIMEOUT_S,
    *,
    sealed: bool = True,
) -> Channel:
    """Open an edge to the actor listening at ``address`` as ``sender``, once the handshake
    (module docstring) has shown that both ends hold ``secret``; with ``sealed``, its frames
    are sealed (the listener must seal too).

    Raises
    ------
    AuthenticationError
        The listener did not prove it holds the secret, refused the edge, or did not answer
        within ``timeout`` seconds.
    """
    _check_secret(secret)
    name = sender.encode()
    if not 0 < len(name) <= 255:
        raise ValueError(f"a sender name is 1–255 utf-8 bytes, got {sender!r}")
    sock = socket.create_connection(address, timeout=timeout)
    try:
        _edge_options(sock)
        ns, mode = os.urandom(_NONCE_BYTES), int(sealed)
        sock.sendall(_HELLO.pack(_MAGIC, _VERSION, mode, ns, len(name)) + name)
        answer = bytes(_recv_exact(sock, _NONCE_BYTES + _MAC_BYTES))
        nr, mac = answer[:_NONCE_BYTES], answer[_NONCE_BYTES:]
        if not hmac.compare_digest(mac, _mac(secret, b"accept", mode, ns, nr, name)):
            raise AuthenticationError(
                f"the listener at {address} does not hold the run's secret: nothing sent"
            )
        sock.sendall(_mac(secret, b"connect", mode, ns, nr, name))
        if bytes(_recv_exact(sock, 1)) != _TAKEN:
            raise AuthenticationError(f"the listener at {address} answered the handshake oddly")
        sock.settimeout(None)
        key = sealing.edge_key(secret, ns, nr, name) if sealed else None
        return Channel(sock, sender, f"{address[0]}:{address[1]}", key, sending=True)
    except (ChannelClosed, ConnectionResetError, BrokenPipeError):
        sock.close()
        raise AuthenticationError(
            f"the listener at {address} closed the connection during the handshake "
            f"(it refused sender {sender!r}, or {_mode_name(int(sealed))} frames)"
        ) from None
    except TimeoutError:
        sock.close()
        raise AuthenticationError(
            f"the listener at {address} did not answer the handshake within {timeout} s"
        ) from None
    except BaseException:
        sock.close()
        raise


# -- the receiving end ------------------------------------------------------------------------


class _Pending:
    """A connection in its handshake: what it has sent so far of the step it is in."""

    def __init__(self, sock: socket.socket, peer, deadline: float) -> None:
        self.sock = sock
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.deadline = deadline
        self.step = "hello"
        self.need = _HELLO.size
        self.got = bytearray()
        self.ns = self.nr = self.name = b""
        self.mode = 0
        self.sender = ""

    def advance(self, secret: bytes, mode: int, expected: set[str], taken: dict) -> str | None:
        """Read what has arrived; returns the reason to reject the connection, or None (go
        on waiting, or ``step == "done"``)."""
        try:
            chunk = self.sock.recv(self.need - len(self.got))
        except BlockingIOError:
            return None
        except OSError as e:
            return f"connection error during the handshake: {e}"
        if not chunk:
            return "closed during the handshake"
        self.got += chunk
        if len(self.got) < self.need:
            return None
        got, self.got = bytes(self.got), bytearray()
        if self.step == "hello":
            magic, version, self.mode, self.ns, self.need = _HELLO.unpack(got)
            if magic != _MAGIC:
                return "not a streamjoin channel (no handshake hello)"
            if version != _VERSION:
                return f"handshake version {version}, this end speaks {_VERSION}"
            if self.mode != mode:
                return (
                    f"a sender of {_mode_name(self.mode)} frames; this node takes "
                    f"{_mode_name(mode)} ones"
                )
            if not self.need:
                return "an empty sender name"
            self.step = "name"
        elif self.step == "name":
            self.name, self.nr = got, os.urandom(_NONCE_BYTES)
            challenge = self.nr + _mac(secret, b"accept", mode, self.ns, self.nr, self.name)
            if not self._send(challenge):
                return "does not read the challenge"
            self.step, self.need = "response", _MAC_BYTES
        else:
            response = _mac(secret, b"connect", mode, self.ns, self.nr, self.name)
            if not hmac.compare_digest(got, response):
                return "wrong response to the challenge: no or a wrong secret"
            self.sender = self.name.decode(errors="replace")
            if self.sender not in expected:
                return f"an authenticated sender {self.sender!r} this node does not expect"
            if self.sender in taken:
                return f"sender {self.sender!r} is connected already"
            if not self._send(_TAKEN):
                return "does not read the answer"
            self.step = "done"
        return None

    def _send(self, data: bytes) -> bool:
        try:
            return self.sock.send(data) == len(data)  # a few bytes into an empty buffer
        except OSError:
            return False


def _reject(pending: _Pending, reason: str) -> None:
    _log.warning("channel: rejected connection from %s: %s", pending.peer, reason)
    pending.sock.close()


def accept_edges(
    server: socket.socket,
    secret: bytes,
    senders: Iterable[str],
    timeout: float = HANDSHAKE_TIMEOUT_S,
    *,
    sealed: bool = True,
) -> dict[str, Channel]:
    """Take one authenticated incoming edge from each of ``senders``: ``{sender: channel}``;
    with ``sealed``, edges whose frames are sealed (a sender that does not seal is refused).

    Connections are authenticated all at once, each within ``timeout`` seconds of being
    accepted, at most :data:`MAX_PENDING` at a time (one more drops the oldest); a connection
    that fails is closed and logged and takes no edge (module docstring). Blocks until every
    sender has connected; raises if ``server`` is shut meanwhile.
    """
    _check_secret(secret)
    expected = set(senders)
    mode = int(sealed)
    taken: dict[str, Channel] = {}
    pending: dict[socket.socket, _Pending] = {}  # oldest first
    selector = selectors.DefaultSelector()
    server.setblocking(False)
    selector.register(server, selectors.EVENT_READ)

    def drop(p: _Pending, reason: str) -> None:
        selector.unregister(p.sock)
        del pending[p.sock]
        _reject(p, reason)

    try:
        while len(taken) < len(expected):
            now = time.monotonic()
            for late in [p for p in pending.values() if p.deadline <= now]:
                drop(late, f"no handshake within {timeout} s")
            wait = min((p.deadline for p in pending.values()), default=None)
            for key, _ in selector.select(None if wait is None else max(0.0, wait - now)):
                if key.fileobj is server:
                    try:
                        sock, peer = server.accept()
                    except BlockingIOError:  # the connection went away again
                        continue
                    sock.setblocking(False)
                    if len(pending) >= MAX_PENDING:
                        drop(next(iter(pending.values())), "too many connections waiting")
                    pending[sock] = _Pending(sock, peer, time.monotonic() + timeout)
                    selector.register(sock, selectors.EVENT_READ)
                elif (
                    isinstance(key.fileobj, socket.socket)
                    and (p := pending.get(key.fileobj)) is not None
                ):
                    reason = p.advance(secret, mode, expected, taken)
                    if reason is not None:
                        drop(p, reason)
                    elif p.step == "done":
                        selector.unregister(p.sock)
                        del pending[p.sock]
                        p.sock.setblocking(True)
                        _edge_options(p.sock)
                        edge = sealing.edge_key(secret, p.ns, p.nr, p.name) if sealed else None
                        taken[p.sender] = Channel(p.sock, p.sender, p.peer, edge, sending=False)
    except BaseException:
        for channel in taken.values():
            channel.close()
        raise
    finally:
        done = len(taken) == len(expected)
        for p in list(pending.values()):
            drop(p, "every sender is connected" if done else "the node stopped accepting")
        selector.close()
        with contextlib.suppress(OSError):  # shut meanwhile
            server.setblocking(True)
    return taken


class Acceptor:
    """:func:`accept_edges` in a thread of its own, started at once: a node takes its incoming
    edges while it connects its outgoing ones (in a cycle of nodes each waiting for the
    other's answer in :func:`connect`, nobody would answer otherwise)."""

    def __init__(
        self, server: socket.socket, secret: bytes, senders: Iterable[str], sealed: bool = True
    ) -> None:
        self._future: Future = Future()
        args = (server, secret, list(senders), HANDSHAKE_TIMEOUT_S, sealed)
        threading.Thread(target=self._run, args=args, daemon=True, name="accept").start()

    def _run(self, server, secret, senders, timeout, sealed) -> None:
        try:
            self._future.set_result(accept_edges(server, secret, senders, timeout, sealed=sealed))
        except BaseException as e:
            self._future.set_exception(e)

    def result(self) -> dict[str, Channel]:
        """``{sender: channel}`` once every sender has connected; raises what accepting
        raised."""
        return self._future.result()


# -- frames -----------------------------------------------------------------------------------


class Channel:
    """One end of an edge whose handshake succeeded: its socket and, on a sealed edge, the
    sealing of its one direction (:mod:`~streamjoin.runtime.ray.sealing`).

    ``frames`` counts the frames sent or taken so far, the end frame included; ``ended``
    says the receiving end has taken the end frame. A channel passes for its socket where
    one is waited on or shut (``fileno``, ``settimeout``, ``shutdown``, ``close``).
    """

    def __init__(
        self, sock: socket.socket, sender: str, peer: str, key: bytes | None, sending: bool
    ) -> None:
        self.sock = sock
        self.sender = sender
        self.peer = peer
        self.sealer = sealing.Sealer(key) if key is not None and sending else None
        self.opener = sealing.Opener(key) if key is not None and not sending else None
        self.frames = 0
        self.ended = False

    @property
    def sealed(self) -> bool:
        return self.sealer is not None or self.opener is not None

    def fileno(self) -> int:
        return self.sock.fileno()

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()

    def send(self, frames: list[list], idle: Callable[[], None] | None = None) -> None:
        """Write whole frames (each a list of pieces from :func:`frame`), blocking until the
        kernel took every byte; sealed, each frame is sealed first, numbered in order.

        With ``idle``, on a socket with a timeout: ``idle()`` runs each time the timeout passes
        with nothing sent (the receiver is not reading), and may raise to give up; a sender that
        must not wait blindly on a stuck or dead receiver looks around there.
        """
        if self.sealer is None:
            self._write([memoryview(p).cast("B") for f in frames for p in f], idle)
        else:
            self.sealer.seal(frames, lambda view: self._write([view], idle))
        self.frames += len(frames)

    def _write(self, views: list[memoryview], idle: Callable[[], None] | None) -> None:
        views = [v for v in views if v.nbytes]
        while views:
            try:
                n = self.sock.sendmsg(views[:512])
            except TimeoutError:
                if idle is None:
                    raise
                idle()
                continue
            while views and n >= views[0].nbytes:
                n -= views.pop(0).nbytes
            if n:
                views[0] = views[0][n:]

    def recv(self):
        """Read one frame: ``(port, message)``, or :data:`END`.

        Raises
        ------
        ChannelClosed
            The connection closed (before the end frame, or after it: see ``ended``).
        ProtocolError
            A frame after the end frame; :class:`FramingError`: bytes that are not a frame of
            a known kind with consistent lengths; :class:`TamperedFrame`: a sealed record
            that does not open, or not in its place.
        """
        if self.opener is None:
            got = _recv_plain(self.sock, self.ended)
        else:
            head = _recv_exact(self.sock, sealing.HEAD_BYTES, True, self.ended)
            size = self.opener.open_head(bytes(head))
            got = wire.read_padded(self.opener.open_box(size, self._read_into))
        if self.ended:
            raise ProtocolError(
                f"{'a second end frame' if got is END else 'a frame'} after the end of the edge"
                f" (frame {self.frames})"
            )
        self.frames += 1
        self.ended = got is END
        return got

    def _read_into(self, view: memoryview) -> int:
        k = self.sock.recv_into(view)
        if k == 0:
            raise ChannelClosed("the sender closed the connection in the middle of a frame")
        return k


def send(channel: Channel, frames: list[list], idle: Callable[[], None] | None = None) -> None:
    """:meth:`Channel.send`."""
    channel.send(frames, idle)


def recv(channel: Channel):
    """:meth:`Channel.recv`."""
    return channel.recv()


def _recv_plain(sock: socket.socket, ended: bool):
    """One plain frame of ``sock``."""
    head = bytes(_recv_exact(sock, wire.HEAD.size, True, ended))
    n_name, kind, n_meta, size = wire.read_head(head)
    if kind == wire.END_KIND:
        return END
    port_meta = bytes(_recv_exact(sock, n_name + n_meta))
    body = memoryview(_recv_exact(sock, size)).toreadonly()
    return wire.read(kind, port_meta, n_name, body)


def _recv_exact(sock: socket.socket, n: int, first: bool = False, ended: bool = False) -> bytearray:
    """``n`` bytes of ``sock`` (``first``: the first bytes of a frame, after the end frame if
    ``ended``). The buffer grows with what arrives (from ``_FIRST_BYTES``, in place where the
    allocator can), so a length a peer states but does not send costs no memory."""
    buf = bytearray(min(n, _FIRST_BYTES))
    got = 0
    while True:
        with memoryview(buf) as view:
            while got < len(buf):
                k = sock.recv_into(view[got:])
                if k == 0:
                    where = "in the middle of a frame"
                    if first and not got:
                        where = "after ending the edge" if ended else "before ending the edge"
                    raise ChannelClosed(f"the sender closed the connection {where}")
                got += k
        if got == n:
            return buf
        buf.extend(bytes(min(len(buf), n - got)))
