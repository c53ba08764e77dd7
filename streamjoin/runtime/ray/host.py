"""The actor side of the ``ray`` executor (:mod:`~streamjoin.runtime.ray.executor`): a
topology node's logic with its connections (:class:`Node`, also the driver's emitter), in a
Ray actor of its own (:class:`Host`) whose threads read the edges and run the logic.

Why one file of ~650 lines: a node's sending, receiving and reconnecting share its sockets
and the lock that guards them (:class:`Node`); the Ray actor (:class:`Host`) is that node plus
its listening and control calls. What its reader hands its worker waits in an
:class:`~streamjoin.runtime.ray.inbox.Inbox`, which coalesces messages.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import ray

from streamjoin.actors import passes_on
from streamjoin.actors.base import ActorConfig, RunSettings
from streamjoin.batch import Batch, Marker, PairBatch
from streamjoin.query import Query
from streamjoin.runtime.coalesce import INBOX, MERGE_TUPLES, merge
from streamjoin.runtime.executor import RunTimeout
from streamjoin.runtime.markers import MarkerGate, marker_step
from streamjoin.runtime.ray import channels
from streamjoin.runtime.ray.inbox import (
    Call,
    EdgeEnded,
    Inbox,
    Message,
    Messages,
    NewEdge,
    ThreadFailed,
)
from streamjoin.runtime.ray.recovery import (
    PROGRESS_PORT,
    REPLAY,
    Delivered,
    DeliveryLog,
    Handled,
    Progress,
)
from streamjoin.runtime.trace import ActorStats, newest_ingest, run_queue_reader
from streamjoin.validation import Columns

#: a recoverable core reports its progress at least every this many steps without pairs
PROGRESS_EVERY = 16


class ActorFailed(RuntimeError):
    """An actor raised or died; the message names the actor and its exception."""


class LostNeighbour(ActorFailed):
    """An actor stopped because a neighbour's connection broke (a consequence, not a cause)."""


class Abandon(Exception):
    """A send of the driver's gave up: its destination is being restarted."""


@dataclass(frozen=True)
class Wiring:
    """What a host needs to join the run's data plane (:meth:`Host.start`).

    Attributes
    ----------
    routes : dict
        ``out_port -> [(dest, dst_port), …]``.
    addresses : dict
        ``dest -> (host, port)`` of every destination.
    senders : list of str
        The nodes (and :data:`REPLAY`) whose edges this host takes.
    bounded : list of str
        Senders on no cycle with this node: their edges may wait while the inbox is full.
    cyclic : bool
    secret : bytes
    inputs : dict
        ``sender -> frozenset of ports`` its frames may be for (a frame for another port is
        a protocol violation).
    sealed : bool
        Whether the edges seal their frames (:mod:`~streamjoin.runtime.ray.sealing`).
    recoverable : frozenset of str
        Nodes whose loss the run survives: a broken edge to or from one is not an error.
    reports_to : str or None
        Where this node sends its :class:`Progress` (a recoverable core: the collector).
    resume : Delivered or None
        A restarted core: what its last life delivered.
    """

    routes: dict
    addresses: dict
    senders: list
    bounded: list
    cyclic: bool
    secret: bytes
    inputs: dict
    sealed: bool = True
    recoverable: frozenset = frozenset()
    reports_to: str | None = None
    resume: Delivered | None = None


class Node:
    """One topology node: its logic object and its outgoing connections.

    Runs inside a Ray actor (:class:`Host`), or in the driver for the emitter, which saves a
    process and a copy of every input batch.
    """

    def __init__(self, name: str, config: ActorConfig, query: Query, settings: RunSettings):
        self.name = name
        self.self_join = query.self_join
        self.stats = ActorStats(role=config.role, step_cpu_ns=0)
        self.reports_logic = config.reports_logic
        # the process's CPU time at its first frame and after its end-of-stream step
        self.cpu0: int | None = None
        self.cpu_end: int | None = None
        self.routes: dict[str, list] = {}  # progress markers' under MARKER_PORT
        self.passes_markers = config.passes_markers  # its logic takes them as messages
        self.out: dict[str, channels.Channel] = {}
        self.sealed = True
        self.lock = threading.Lock()  # guards out, broken and ended_out
        self.broken: set[str] = set()  # destinations being restarted: nothing goes there
        self.ended_out = False
        self.recoverable: frozenset = frozenset()
        self.frames_sent = 0
        self.frames_handled = 0
        self.step_cpu = self.step_wait = self.wait_seen = 0  # (see _timed), ns
        self.waited: Callable[[], int] | None = None  # the stepping thread's run-queue wait
        self.merge_tuples = max(settings.batch_size, MERGE_TUPLES)
        self.activity: tuple[str, float] | None = None  # what it does, since when
        # a recoverable core: its progress, where it reports it, what its last life delivered
        self.reports_to: str | None = None
        self.handled = Handled(query.self_join)
        self.delivered: Delivered | None = None
        self.quiet_steps = 0
        self.logic = self._guard(config.build, query, settings, time.monotonic_ns)

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise ActorFailed(
                f"actor {self.name!r} ({self.stats.role}) failed: {type(e).__name__}: {e}"
            ) from e

    def open(
        self,
        routes: dict[str, list],
        addresses: dict[str, tuple],
        secret: bytes,
        recoverable,
        sealed: bool,
    ) -> None:
        """Connect to every destination: ``routes[out_port] = [(dest, dst_port), …]`` (the
        progress markers' under :data:`~streamjoin.batch.MARKER_PORT`:
        :meth:`~streamjoin.topologies.base.Topology.marker_routes`), ``addresses[dest] =
        (host, port)``, proving the run's ``secret`` (and ``sealed``: sealing the frames); a
        broken edge to a ``recoverable`` node waits for :meth:`reconnect` instead of
        failing."""
        self.routes = routes
        self.recoverable = frozenset(recoverable)
        self.sealed = sealed
        for d, a in addresses.items():
            self.out[d] = self._connect(a, secret)

    def _connect(self, address, secret) -> channels.Channel:
        return channels.connect(address, self.name, secret, sealed=self.sealed)

    def reconnect(self, dest: str, address, secret: bytes) -> None:
        """A new edge to ``dest``, restarted at ``address``; ended at once if this node has
        ended its edges already."""
        sock = self._connect(address, secret)
        with self.lock:
            old = self.out.get(dest)
            self.out[dest] = sock
            self.broken.discard(dest)
            ended = self.ended_out
        if old is not None:
            close_socket(old)
        if ended:
            self._write(dest, [channels.end_frame()])

    def _send(self, messages, report: bool = False) -> None:
        frames: dict[str, list] = {}
        pairs = False
        for port, msg in messages:
            if self.delivered is not None and isinstance(msg, PairBatch):
                msg = self.delivered.undelivered(msg)  # its last life delivered the rest
                if not len(msg):
                    continue
            # a marker follows pairs: the collector takes both once progress covers them
            pairs = pairs or isinstance(msg, (PairBatch, Marker))
            self.stats.batches_out += 1
            self.stats.tuples_out += len(msg)
            dests = self.routes.get(port, ())
            if dests:
                body = channels.payload(msg)
                for dest, dst_port in dests:
                    frames.setdefault(dest, []).append(channels.frame(dst_port, body))
        if report and self.reports_to is not None:
            self.quiet_steps = 0 if pairs else self.quiet_steps + 1
            if pairs or self.quiet_steps >= PROGRESS_EVERY:
                upto = Progress(*self.handled.upto)
                progress = channels.frame(PROGRESS_PORT, channels.payload(upto))
                frames.setdefault(self.reports_to, []).append(progress)
                self.quiet_steps = 0
        for dest, fs in frames.items():
            self.frames_sent += len(fs)  # before the receiver can count them handled
            self._write(dest, fs)

    def _write(self, dest: str, frames: list) -> None:
        with self.lock:
            if dest in self.broken:
                return
            sock = self.out[dest]
        self.activity = (f"sending to {dest!r}", time.monotonic())
        try:
            sock.send(frames, self._idle(dest))
        except RunTimeout:  # (a TimeoutError, so an OSError: not a lost edge)
            raise
        except (OSError, Abandon) as e:
            if dest not in self.recoverable:
                raise LostNeighbour(
                    f"actor {self.name!r} ({self.stats.role}) could not send to "
                    f"{dest!r}: {type(e).__name__}: {e}"
                ) from e
            with self.lock:  # it is being restarted: what it misses, the driver replays
                if self.out.get(dest) is sock:
                    self.broken.add(dest)
        finally:
            self.activity = None

    def _idle(self, dest: str) -> Callable[[], None] | None:
        """What to do while a send to ``dest`` waits (the driver: look at the actors)."""
        return None

    def _end_edges(self) -> None:
        with self.lock:
            self.ended_out = True
            dests = list(self.out)
        for dest in dests:
            self._write(dest, [channels.end_frame()])

    def _timed(self, fn, *args):
        """``fn(*args)`` (guarded), its wall and thread CPU time counted as the node's step
        (the CPU also kept as ``step_cpu``; as ``step_wait`` how long the thread waited for a
        processor since its previous step ended: its sends, its wake-up for this message and
        this step; -1 where not measured: one read a step, not two)."""
        if self.waited is None:  # (made by the thread that steps)
            self.waited = run_queue_reader() or (lambda: -1)
            self.wait_seen = self.waited()
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        out = self._guard(fn, *args)
        self.stats.busy_ns += time.perf_counter_ns() - t0
        self.step_cpu = time.thread_time_ns() - c0
        seen, self.wait_seen = self.wait_seen, self.waited()
        self.step_wait = self.wait_seen - seen if seen >= 0 else -1
        self.stats.step_cpu_ns = (self.stats.step_cpu_ns or 0) + self.step_cpu
        return out

    def _step(self, fn, *args, batch: Batch | None = None, lag_of=None) -> None:
        """Run ``fn(*args)`` as a step and send its output; ``batch``: the batch it handles
        (its progress), ``lag_of``: the message whose tuples the step's lags are counted
        from (``ActorStats.lag``)."""
        self.activity = ("in a step", time.monotonic())
        start = time.monotonic_ns()  # the clock the emitter stamps tuples with
        out = self._timed(fn, *args)
        if lag_of is not None:
            end = time.monotonic_ns()
            self.stats.lag(newest_ingest(lag_of), start, end, self.step_cpu, self.step_wait)
        self.activity = None
        if self.reports_to is not None:
            self.handled.advance(batch, self.logic.held_batches)
        self._send(out, report=True)

    def on_chunk(self, cols: Columns) -> list:
        """Stamp and send a chunk (the emitter); returns the messages it sent."""
        self.stats.tuples_in += len(cols)
        start = time.monotonic_ns()
        out = self._timed(self.logic.on_chunk, cols)
        # handed over as the step begins
        self.stats.lag(start, start, time.monotonic_ns(), self.step_cpu, self.step_wait)
        self._send(out)
        return out

    def on_eof(self, end_edges: bool) -> list:
        """The end-of-stream step; with ``end_edges`` the outgoing edges end after it."""
        out = self._timed(self.logic.on_eof)
        if self.reports_to is not None:
            self.handled.advance(None, self.logic.held_batches)
        self._send(out, report=True)
        if self.reports_to is not None and self.quiet_steps:  # the last progress
            self.quiet_steps = PROGRESS_EVERY
            self._send([], report=True)
        if end_edges:
            self._end_edges()
        self.cpu_end = time.process_time_ns()
        return out

    def shut(self) -> None:
        for sock in list(self.out.values()):
            close_socket(sock)


def close_socket(sock) -> None:
    """Shut a socket both ways (a thread blocked on it wakes) and close it (a peer whose
    data it never read gets a reset: a shut-down socket would leave that peer blocked)."""
    with contextlib.suppress(OSError):  # already shut, or never connected
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@ray.remote(max_task_retries=0, max_concurrency=4)  # type: ignore[call-overload]  # ray's overloads lack actor options
class Host(Node):
    """A node in its own Ray actor: a worker thread that reads its edges and runs the logic,
    and in a cyclic graph a reader thread besides (module docstring).

    Ray calls (listen, start, watch, settle, end, failure, status, frontiers, expect,
    reconnect, report) come from the driver; ``watch`` waits while the others run.
    """

    def listen(self, loopback: bool) -> tuple[str, int, str]:
        """Open the socket incoming edges connect to, on loopback or on the node's IP (a
        cluster); returns its address and the Ray node this actor runs on."""
        self.host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
        self.server = channels.listen(self.host)
        self.error: ActorFailed | None = None
        self.done = threading.Event()
        self.ins: list = []
        self.edges = threading.Condition()
        self.lost: set[str] = set()  # senders whose edge broke and is not taken again yet
        self.ended: set[str] = set()  # senders whose edge ended
        self.stepped_eof = False  # end() ran: a cyclic graph's edges may close from now on
        self.held: dict[str, list] = {}  # pairs waiting for their sender's progress
        self.deliveries: dict[str, DeliveryLog] = {}  # what each recoverable sender delivered
        self.last_seq: dict[str, int] = {}  # last seq taken on each port
        self.dedup = False  # drop tuples at or below last_seq (a neighbour was restarted)
        self.waiting: list = []  # edges read after the replay
        self.inbox = Inbox(self.logic.merges_batches, INBOX, self.merge_tuples)
        host, port = self.server.getsockname()[:2]
        return host, port, ray.get_runtime_context().get_node_id()

    def start(self, wiring: Wiring) -> None:
        """Connect to the destinations and start reading the incoming edges, both ends
        proving the run's secret; the edges of ``wiring.bounded`` senders (edges on no
        cycle) wait while the inbox is full. A restarted core reads its replay edge first."""
        n_in = len(wiring.senders)
        self.cyclic = wiring.cyclic
        self.bounded_senders = set(wiring.bounded)
        self.reports_to = wiring.reports_to
        if wiring.resume is not None:
            self.delivered = wiring.resume
            self.handled = Handled(self.self_join, wiring.resume.upto)
            self.dedup = True
        self.inputs = wiring.inputs
        self.gate = MarkerGate([s for s in wiring.senders if s != REPLAY])
        self.acceptor = channels.Acceptor(
            self.server, wiring.secret, wiring.senders, sealed=wiring.sealed
        )
        self.open(wiring.routes, wiring.addresses, wiring.secret, wiring.recoverable, wiring.sealed)
        if self.cyclic:
            threading.Thread(
                target=self._read, args=(n_in,), daemon=True, name=f"read-{self.name}"
            ).start()
        threading.Thread(
            target=self._work, args=(n_in,), daemon=True, name=f"work-{self.name}"
        ).start()

    # -- threads ------------------------------------------------------------------------------

    def _accept(self) -> tuple[selectors.BaseSelector, dict]:
        """Take the incoming edges: a selector over them and the sender of each. No
        one else connects after them: the listening socket closes. The edges of a restarted
        core wait until its replay edge has ended."""
        names = {sock: name for name, sock in self.acceptor.result().items()}
        close_socket(self.server)
        self.ins.extend(names)
        selector = selectors.DefaultSelector()
        replay = [s for s, n in names.items() if n == REPLAY]
        for sock in replay or self.ins:
            selector.register(sock, selectors.EVENT_READ)
        if replay:
            self.waiting = [s for s in self.ins if s not in replay]
        return selector, names

    def _receive(self, sock, names: dict, selector, live: set) -> None:
        """Read one frame of ``sock`` into the inbox. A broken connection is a lost neighbour
        (or, from a recoverable one, waits for its new edge); a frame that breaks the edge's
        protocol ends the run (:meth:`_refuse`). An edge that has ended is read on while this
        node works, so that anything but its close is caught."""
        sender = names[sock]
        if self.cpu0 is None:
            self.cpu0 = time.process_time_ns()
        try:
            frame = sock.recv()
        except channels.ProtocolError as e:
            raise self._refuse(sender, e) from None
        except Exception as e:
            # closed after its end, or after this node's end-of-stream step (a cyclic graph,
            # whose edges never end: the driver closes them once every node is done)
            if sock.ended or self.stepped_eof:
                selector.unregister(sock)
                return
            if sender not in self.recoverable:
                raise LostNeighbour(
                    f"actor {self.name!r} ({self.stats.role}) lost its edge from "
                    f"{sender!r}: {type(e).__name__}: {e}"
                ) from e
            self._lose(sock, sender, selector, live)
            return
        if frame is channels.END:
            if self.cyclic:
                raise self._refuse(sender, "an end frame, on a cyclic graph whose edges never end")
            live.discard(sock)
            with self.edges:
                self.ended.add(sender)
            self.inbox.put(EdgeEnded(sender))
            if sender == REPLAY:
                for waiting in self.waiting:
                    selector.register(waiting, selectors.EVENT_READ)
                self.waiting = []
            return
        port, msg = frame
        if port not in self.inputs.get(sender, ()):
            raise self._refuse(sender, f"a frame for port {port!r}, which that edge does not feed")
        if (port == PROGRESS_PORT) != isinstance(msg, Progress):
            raise self._refuse(sender, f"a {type(msg).__name__} frame on port {port!r}")
        if isinstance(msg, Progress):  # the pairs before it are delivered, whole
            held = self.held.pop(sender, [])
            for port_, m in held:
                self.inbox.put(Message(sender, port_, m))
            taken = [m for _, m in held if isinstance(m, PairBatch)]
            self.deliveries.setdefault(sender, DeliveryLog()).commit(taken, msg)
        elif sender in self.recoverable and (
            isinstance(msg, PairBatch) or (isinstance(msg, Marker) and self.held.get(sender))
        ):  # (a marker after held pairs waits with them; only the collector holds pairs)
            self.held.setdefault(sender, []).append((port, msg))
        else:
            self.inbox.put(Message(sender, port, msg))

    def _refuse(self, sender: str, what) -> ActorFailed:
        """The error that ends the run when the edge from ``sender`` breaks its protocol:
        nothing more is read from it (the run's result would not be exact)."""
        return ActorFailed(
            f"actor {self.name!r} ({self.stats.role}) ended the run: on its edge from "
            f"{sender!r}, {what}"
        )

    def _lose(self, sock, sender: str, selector, live: set) -> None:
        """A recoverable sender's edge broke: forget what it sent without its progress and
        wait for the driver to announce its new edge (:meth:`expect`)."""
        selector.unregister(sock)
        live.discard(sock)
        self.ins.remove(sock)
        close_socket(sock)
        self.held.pop(sender, None)
        with self.edges:
            self.lost.add(sender)
            self.edges.notify_all()

    def _adopt(self, sock, sender: str, names: dict, selector, live: set) -> None:
        names[sock] = sender
        self.ins.append(sock)
        live.add(sock)
        if self.waiting:  # still replaying: after the replay
            self.waiting.append(sock)
        else:
            selector.register(sock, selectors.EVENT_READ)

    def _poll(self, selector, names: dict, live: set, wait: bool = True) -> None:
        """Acyclic graphs: the worker reads its edges itself, what is ready — and, with
        ``wait``, waits for a frame if nothing waits in the inbox — up to ``INBOX`` messages;
        the socket buffers hold the rest, and then the senders wait."""
        while live and len(self.inbox.items) < INBOX:
            # a frame may put nothing in the inbox (pairs waiting for their progress)
            ready = selector.select(None if wait and not self.inbox.items else 0)
            if not ready:
                return
            for key, _ in ready:
                if key.fileobj is self.inbox.wake_r:  # an item from another thread
                    key.fileobj.recv(64)
                else:
                    self._receive(key.fileobj, names, selector, live)

    def _read(self, n_in: int) -> None:
        """Cyclic graphs: a thread that reads on while the worker waits in a send."""
        try:
            selector, names = self._accept()
            limited = {sock for sock in self.ins if names[sock] in self.bounded_senders}
            selector.register(self.inbox.wake_r, selectors.EVENT_READ)
            live = set(self.ins)
            paused = False
            while live:
                if self.inbox.pause() != paused:
                    paused = not paused
                    for sock in limited & live:
                        if paused:
                            selector.unregister(sock)
                        else:
                            selector.register(sock, selectors.EVENT_READ)
                for key, _ in selector.select():
                    if key.fileobj is self.inbox.wake_r:
                        key.fileobj.recv(64)
                    else:
                        self._receive(key.fileobj, names, selector, live)
        except Exception as e:
            if self.error is None:  # else: our own shutdown woke us
                self.inbox.put(ThreadFailed(e))

    def _work(self, n_in: int) -> None:
        ended = 0
        try:
            if not self.cyclic:
                selector, names = self._accept()
                selector.register(self.inbox.wake_r, selectors.EVENT_READ)
                live = set(self.ins)
            while True:
                held = self.logic.held_batches
                if not self.cyclic:
                    self._poll(selector, names, live, wait=not held)
                if held and not self.inbox.items:  # nothing waits: the held output leaves
                    self._step(self.logic.on_idle)
                    continue
                item = self.inbox.take()
                if (
                    isinstance(item, Messages)
                    and isinstance(item.messages[0], Marker)
                    and not self.passes_markers
                ):
                    passed = self.gate.take(item.sender, item.messages[0])
                    if passed is not None:
                        self._step(marker_step, self.logic, passed)
                    self.frames_handled += len(item.messages)
                elif isinstance(item, Messages):
                    port, group = item.port, item.messages
                    msg = self._fresh(port, merge(group))
                    if msg is not None:
                        self.stats.batches_in += 1
                        self.stats.tuples_in += len(msg)
                        # a batch passed on along a chain leaves first: the next core starts
                        # on it while this one works (DP-Join, §III-C)
                        self._send(self._guard(passes_on, self.logic, port, msg))
                        batch = msg if isinstance(msg, Batch) else None
                        self._step(self.logic.on_batch, port, msg, batch=batch, lag_of=msg)
                    self.frames_handled += len(group)
                elif isinstance(item, EdgeEnded):
                    ended += 1
                    if not self.cyclic and ended == n_in:  # end of stream in-band
                        self.on_eof(end_edges=True)
                        self.done.set()
                        return
                elif isinstance(item, Call):
                    item.fn()
                    item.finished.set()
                elif isinstance(item, NewEdge):
                    self._adopt(item.sock, item.sender, names, selector, live)
                else:
                    raise item.error
        except Exception as e:
            self._fail(e)

    def _fresh(self, port: str, msg):
        """``msg`` less the tuples at or below the last ``seq`` this port took, once a
        neighbour has been restarted (it replays what this node may have); None if nothing
        is left. Each port's batches come in ``seq`` order, so nothing else is dropped."""
        if not isinstance(msg, Batch) or not len(msg):
            return msg
        last = self.last_seq.get(port, -1)
        self.last_seq[port] = max(last, int(msg.seq[-1]))
        if not self.dedup or msg.seq[0] > last:
            return msg
        if msg.seq[-1] <= last:
            return None
        return msg.take(np.flatnonzero(msg.seq > last))

    def _fail(self, e: Exception) -> None:
        if self.error is None:
            self.error = (
                e
                if isinstance(e, ActorFailed)
                else ActorFailed(
                    f"actor {self.name!r} ({self.stats.role}) failed: {type(e).__name__}: {e}"
                )
            )
        for sock in [self.server, *self.ins, *self.out.values()]:
            close_socket(sock)
        self.done.set()

    # -- driver calls -------------------------------------------------------------------------

    def watch(self) -> None:
        """Wait until this node has ended (acyclic graphs) or failed; raises its error. The
        driver keeps one call waiting per actor: Ray ends it if the actor's process dies."""
        self.done.wait()
        self._raise()

    def failure(self) -> tuple[str, str] | None:
        """``(kind, message)`` of this node's error: ``"cause"`` for its own failure,
        ``"lost"`` for a broken connection to a neighbour; None if it has not failed."""
        if getattr(self, "error", None) is None:
            return None
        return ("lost" if isinstance(self.error, LostNeighbour) else "cause", str(self.error))

    def status(self) -> str | None:
        """What this node is busy with (None: it has ended)."""
        if getattr(self, "done", None) is None:
            return "not started"
        if self.done.is_set():
            return None
        if self.activity is not None:
            what, since = self.activity
            return f"{what} for {time.monotonic() - since:.1f} s"
        waiting = len(self.inbox.items)
        return f"{waiting} messages waiting" if waiting else "waiting for input"

    def frontiers(self) -> dict[str, tuple[int, int]]:
        """The progress each recoverable sender has delivered here (the collector)."""
        return {n: log.upto for n, log in getattr(self, "deliveries", {}).items()}

    def expect(self, sender: str, timeout: float) -> tuple | None:
        """Take a new edge from ``sender``, restarted: once the old edge is seen broken,
        listen for the new one; returns ``(address, Delivered or None)``, or None if the old
        edge had ended (nothing more is needed from it)."""
        with self.edges:
            if not self.edges.wait_for(
                lambda: sender in self.lost or sender in self.ended, timeout
            ):
                raise ActorFailed(f"actor {self.name!r} did not see its edge from {sender!r} break")
            if sender in self.ended:
                return None
            self.lost.discard(sender)
        self.dedup = True
        server = channels.listen(self.host)
        acceptor = channels.Acceptor(server, self.secret, [sender], self.sealed)
        threading.Thread(
            target=self._take_edge, args=(acceptor, server, sender), daemon=True
        ).start()
        log = self.deliveries.get(sender)
        return server.getsockname()[:2], None if log is None else log.delivered()

    def _take_edge(self, acceptor, server, sender: str) -> None:
        try:
            sock = acceptor.result()[sender]
        except Exception as e:
            self.inbox.put(ThreadFailed(e))
            return
        finally:
            close_socket(server)
        self.inbox.put(NewEdge(sender, sock))

    def open(self, routes, addresses, secret, recoverable, sealed) -> None:
        self.secret = secret
        super().open(routes, addresses, secret, recoverable, sealed)

    def reconnect_to(self, dest: str, address) -> None:
        """A new edge to ``dest``, restarted at ``address``."""
        self.reconnect(dest, address, self.secret)

    def edge_counts(self) -> tuple[bool, dict[str, int], dict[str, tuple[int, bool]]]:
        """What the driver audits the edges with: whether this node waits for input with
        nothing to do, the frames sent on each outgoing edge, and ``(frames, ended)`` of each
        incoming one (end frames counted)."""
        idle = (
            not self.done.is_set()
            and self.activity is None
            and not self.inbox.items
            and self.error is None
        )
        with self.lock:
            sent = {dest: ch.frames for dest, ch in self.out.items()}
        taken = {ch.sender: (ch.frames, ch.ended) for ch in list(self.ins)}
        return idle, sent, taken

    def settle(self) -> tuple[int, int]:
        """``(frames sent, frames handled)`` so far (cyclic graphs find quiescence with it)."""
        self._raise()
        return self.frames_sent, self.frames_handled

    def end(self) -> None:
        """Run the end-of-stream step in the worker thread (cyclic graphs, once quiescent)."""
        finished = threading.Event()
        self.inbox.put(Call(lambda: self.on_eof(end_edges=False), finished))
        while not finished.wait(0.05):
            self._raise()
        self._raise()
        self.stepped_eof = True

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def report(self):
        """``(stats, logic)``: the logic object only where its config says it reports it
        (``ActorConfig.reports_logic``: the collector's)."""
        inbox = getattr(self, "inbox", None)
        self.stats.peak_queue = inbox.peak if inbox is not None else 0
        now = time.process_time_ns()
        first = now if self.cpu0 is None else self.cpu0
        self.stats.cpu_ns = (now if self.cpu_end is None else self.cpu_end) - first
        return self.stats, (self.logic if self.reports_logic else None)
