"""The ``ray`` executor: one Ray actor per topology node, running the same logic objects.

- Each node's logic (:mod:`streamjoin.actors`) is built inside a :class:`_Host` actor; kernels
  are warmed in its constructor (numba's disk cache makes that a load, not a compile). The
  emitter runs in the driver, next to the source. On a local cluster the driver first
  compiles every kernel the actors will run, once, while Ray starts, so that with an empty
  cache the actors do not each compile the same kernels at once (:func:`_build_driver_side`).
- **Ray is the control plane, sockets the data plane.** Ray places the actors, starts and
  kills them and carries the few control calls of a run; the batches travel over one TCP
  connection per graph edge (:mod:`streamjoin.runtime.channels`), as a Ray call costs about
  1–2 ms of this machine's two cores and a frame tens of microseconds. (Ray's compiled graphs
  were measured instead: their channels wait in a ``sched_yield`` loop that keeps idle actors
  at half a core each on a 2-core machine.)
- **Trust.** The driver makes a secret per run and hands it to the actors through Ray (whose
  own channel is authenticated); both ends of every edge prove it before a frame is read, and
  a host takes exactly one edge from each of its graph predecessors, then stops listening
  (:mod:`streamjoin.runtime.channels`). Sockets bind to loopback when every Ray node is the
  driver's machine, to the node's IP on a cluster.
- In each host one thread reads the incoming connections and feeds the logic, so the logic
  is only ever called from one thread; each connection is FIFO, so every edge is. In a
  cyclic graph a second thread keeps reading while the first waits in a send.
- **Coalescing.** When several batches of one sender for one port wait in the inbox, the
  worker hands them to the logic as one where the answer cannot change (:func:`mergeable`):
  under light load every batch is joined on arrival, under heavy load batches grow.
- **Backpressure.** A host reads no further once ``INBOX`` messages wait; the socket buffers
  fill and the sender blocks, the emitter in the driver too, so memory stays bounded when
  the source is faster than the join. In a cyclic graph the reader stops reading only the
  edges that lie on no cycle: two handshake neighbours blocked on each other's full buffers
  would deadlock.
- **End of stream.** In an acyclic graph it travels in-band: a node that has seen every
  incoming edge end runs its end-of-stream step and ends its outgoing edges. In a cyclic
  graph the driver waits until no frame is in flight (counters of frames sent and handled),
  then ends the nodes one at a time in :meth:`Topology.eof_order`, waiting again after each.
- **Failure.** An actor whose logic raises records the error and shuts its connections;
  its neighbours then fail on their next read or write, and so on, so nothing waits for a
  frame that will not come. The driver asks every actor for its error and raises the
  failing actor's own one as :class:`ActorFailed`, naming the actor; all actors are killed:
  never a hang, never a short result.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import networkx as nx
import ray

from streamjoin.actors import passes_on
from streamjoin.actors.base import ActorConfig, RunSettings
from streamjoin.batch import Columns
from streamjoin.query import Query
from streamjoin.runtime import channels
from streamjoin.runtime.coalesce import INBOX, MERGE_TUPLES, merge, mergeable
from streamjoin.runtime.executor import WallClock
from streamjoin.runtime.pipeline import Progress
from streamjoin.runtime.trace import ActorStats, RunTrace
from streamjoin.topologies.base import Topology

#: seconds the driver gives the actors to report their errors once a run has failed
FAILURE_WAIT_S = 10.0
#: a test hook: called in the driver with ``{node: (host, port)}`` once every actor listens,
#: before any edge connects (the tests play an intruder with it); None in a normal run
on_listen: Callable[[dict[str, tuple[str, int]]], None] | None = None


class ActorFailed(RuntimeError):
    """An actor raised; the message names the actor and its exception."""


class _LostNeighbour(ActorFailed):
    """An actor stopped because a neighbour's connection broke (a consequence, not a cause)."""


class _Inbox:
    """What a host's reader hands its worker, in order of arrival: ``("msg", sender, port,
    message)``, ``("end", sender)``, ``("call", fn, done)`` and ``("error", exception)``.

    Once ``limit`` messages wait, the reader stops reading the edges that lie on no cycle
    (:meth:`pause`) until the worker has taken one, and a wake-up socket tells it so. Nothing
    here blocks the reader: edges on a cycle are read on, but their messages count too, so a
    congested handshake core holds back the source instead of the skew between its streams
    growing without bound.
    """

    def __init__(self, merges_batches: bool, limit: int, max_tuples: int) -> None:
        self.merges_batches = merges_batches
        self.limit = limit
        self.max_tuples = max_tuples
        self.items: deque = deque()
        self.cond = threading.Condition()
        self.counted = 0  # messages waiting
        self.paused = False
        self.peak = 0
        self.wake_r, self.wake_w = socket.socketpair()

    def put(self, item) -> None:
        with self.cond:
            self.items.append(item)
            if item[0] == "msg":
                self.counted += 1
            self.peak = max(self.peak, len(self.items))
            self.cond.notify_all()

    def pause(self) -> bool:
        """Whether the reader should stop reading bounded edges; if so, the worker wakes it
        (through ``wake_r``) once there is room again."""
        with self.cond:
            self.paused = self.counted >= self.limit
            return self.paused

    def take(self) -> tuple:
        """The next item; consecutive messages of one sender for one port that
        :func:`mergeable` allows come as one ``("msg", sender, port, [messages])``."""
        with self.cond:
            while not self.items:
                self.cond.wait()
            item = self.items.popleft()
            if item[0] == "msg":
                _, sender, port, msg = item
                group = [msg]
                while self.items:
                    nxt = self.items[0]
                    if not (
                        nxt[0] == "msg"
                        and nxt[1] == sender
                        and nxt[2] == port
                        and mergeable(self.merges_batches, group, nxt[3], self.max_tuples)
                    ):
                        break
                    group.append(self.items.popleft()[3])
                self.counted -= len(group)
                item = ("msg", sender, port, group)
                if self.paused and self.counted < self.limit:
                    self.paused = False
                    self.wake_w.send(b"x")
            return item


class _Node:
    """One topology node: its logic object and its outgoing connections.

    Runs inside a Ray actor (:class:`_Host`), or in the driver for the emitter, which saves a
    process and a copy of every input batch.
    """

    def __init__(self, name: str, config: ActorConfig, query: Query, settings: RunSettings):
        self.name = name
        self.stats = ActorStats(role=config.role)
        self.routes: dict[str, list] = {}
        self.out: dict[str, object] = {}
        self.frames_sent = 0
        self.frames_handled = 0
        self.merge_tuples = max(settings.batch_size, MERGE_TUPLES)
        self.logic = self._guard(config.build, query, settings, time.monotonic_ns)

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise ActorFailed(
                f"actor {self.name!r} ({self.stats.role}) failed: {type(e).__name__}: {e}"
            ) from e

    def open(self, routes: dict[str, list], addresses: dict[str, tuple], secret: bytes) -> None:
        """Connect to every destination: ``routes[out_port] = [(dest, dst_port), …]``,
        ``addresses[dest] = (host, port)``, proving the run's ``secret``."""
        self.routes = routes
        self.out = {d: channels.connect(a, self.name, secret) for d, a in addresses.items()}

    def _send(self, messages) -> None:
        frames: dict[str, list] = {}
        for port, msg in messages:
            self.stats.batches_out += 1
            self.stats.tuples_out += len(msg)
            dests = self.routes.get(port, ())
            if dests:
                body = channels.payload(msg)
                for dest, dst_port in dests:
                    frames.setdefault(dest, []).append(channels.frame(dst_port, body))
        for dest, fs in frames.items():
            self.frames_sent += len(fs)  # before the receiver can count them handled
            self._write(dest, fs)

    def _write(self, dest: str, frames: list) -> None:
        try:
            channels.send(self.out[dest], frames)
        except OSError as e:
            raise _LostNeighbour(
                f"actor {self.name!r} ({self.stats.role}) could not send to "
                f"{dest!r}: {type(e).__name__}: {e}"
            ) from e

    def _end_edges(self) -> None:
        for dest in self.out:
            self._write(dest, [channels.end_frame()])

    def _step(self, fn, *args) -> None:
        t0 = time.perf_counter_ns()
        out = self._guard(fn, *args)
        self.stats.busy_ns += time.perf_counter_ns() - t0
        self._send(out)

    def on_chunk(self, cols: Columns) -> None:
        self.stats.tuples_in += len(cols)
        self._step(self.logic.on_chunk, cols)

    def on_eof(self, end_edges: bool) -> None:
        self._step(self.logic.on_eof)
        if end_edges:
            self._end_edges()

    def shut(self) -> None:
        for sock in self.out.values():
            _shut(sock)


def _shut(sock) -> None:
    """Shut a socket both ways: a thread blocked on it wakes, the peer sees it closed."""
    with contextlib.suppress(OSError):  # already shut, or never connected
        sock.shutdown(socket.SHUT_RDWR)


@ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=4)
class _Host(_Node):
    """A node in its own Ray actor: a worker thread that reads its edges and runs the logic,
    and in a cyclic graph a reader thread besides (module docstring).

    Ray calls (listen, start, finished, settle, end, failure, report) come from the driver
    one at a time, except ``failure``, which may run while ``finished`` waits.
    """

    def listen(self, loopback: bool) -> tuple[str, int]:
        """Open the socket incoming edges connect to, on loopback or on the node's IP (a
        cluster); returns its address."""
        self.server = channels.listen("127.0.0.1" if loopback else ray.util.get_node_ip_address())
        self.error: ActorFailed | None = None
        self.done = threading.Event()
        self.ins: list = []
        return self.server.getsockname()[:2]

    def start(
        self, routes, addresses, senders: list[str], bounded: list[str], cyclic: bool, secret
    ) -> None:
        """Connect to the destinations and start reading the incoming edges of ``senders``,
        both ends proving the run's ``secret``; the edges of the ``bounded`` senders (edges on
        no cycle) wait while the inbox is full."""
        n_in = len(senders)
        self.cyclic = cyclic
        self.cpu0 = time.process_time_ns()
        self.bounded_senders = set(bounded)
        self.inbox = _Inbox(self.logic.merges_batches, INBOX, self.merge_tuples)
        self.acceptor = channels.Acceptor(self.server, secret, senders)  # before connecting
        self.open(routes, addresses, secret)
        if cyclic:
            threading.Thread(
                target=self._read, args=(n_in,), daemon=True, name=f"read-{self.name}"
            ).start()
        threading.Thread(
            target=self._work, args=(n_in,), daemon=True, name=f"work-{self.name}"
        ).start()

    # -- threads ------------------------------------------------------------------------------

    def _accept(self) -> tuple[selectors.BaseSelector, dict]:
        """Take the incoming edges: a selector over them and the sender of each. No
        one else connects after them: the listening socket closes."""
        names = {sock: name for name, sock in self.acceptor.result().items()}
        self.server.close()
        self.ins.extend(names)
        selector = selectors.DefaultSelector()
        for sock in self.ins:
            selector.register(sock, selectors.EVENT_READ)
        return selector, names

    def _receive(self, sock, names: dict, selector, live: set) -> None:
        """Read one frame of ``sock`` into the inbox."""
        try:
            frame = channels.recv(sock)
        except Exception as e:
            raise _LostNeighbour(
                f"actor {self.name!r} ({self.stats.role}) lost its edge from "
                f"{names[sock]!r}: {type(e).__name__}: {e}"
            ) from e
        if frame is channels.END:
            selector.unregister(sock)
            live.discard(sock)
            self.inbox.put(("end", names[sock]))
        else:
            self.inbox.put(("msg", names[sock], *frame))

    def _poll(self, selector, names: dict, live: set) -> None:
        """Acyclic graphs: the worker reads its edges itself, what is ready — and waits for a
        frame if nothing waits in the inbox — up to ``INBOX`` messages; the socket buffers
        hold the rest, and then the senders wait."""
        block = not self.inbox.items
        while live and len(self.inbox.items) < INBOX:
            ready = selector.select(None if block else 0)
            if not ready:
                return
            for key, _ in ready:
                self._receive(key.fileobj, names, selector, live)
            block = False

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
                self.inbox.put(("error", e))

    def _work(self, n_in: int) -> None:
        ended = 0
        try:
            if not self.cyclic:
                selector, names = self._accept()
                live = set(self.ins)
            while True:
                if not self.cyclic:
                    self._poll(selector, names, live)
                item = self.inbox.take()
                kind = item[0]
                if kind == "msg":
                    _, _, port, group = item
                    msg = merge(group)
                    self.stats.batches_in += 1
                    self.stats.tuples_in += len(msg)
                    # a batch passed on along a chain leaves first: the next core starts on
                    # it while this one works (DP-Join, §III-C)
                    self._send(self._guard(passes_on, self.logic, port, msg))
                    self._step(self.logic.on_batch, port, msg)
                    self.frames_handled += len(group)
                elif kind == "end":
                    ended += 1
                    if not self.cyclic and ended == n_in:  # end of stream in-band
                        self.on_eof(end_edges=True)
                        self.done.set()
                        return
                elif kind == "call":
                    _, fn, finished = item
                    fn()
                    finished.set()
                else:
                    raise item[1]
        except Exception as e:
            self._fail(e)

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
            _shut(sock)
        self.done.set()

    # -- driver calls -------------------------------------------------------------------------

    def finished(self) -> None:
        """Wait until this node has ended (acyclic graphs); raises its error."""
        self.done.wait()
        self._raise()

    def failure(self) -> tuple[str, str] | None:
        """``(kind, message)`` of this node's error: ``"cause"`` for its own failure,
        ``"lost"`` for a broken connection to a neighbour; None if it has not failed."""
        if self.error is None:
            return None
        return ("lost" if isinstance(self.error, _LostNeighbour) else "cause", str(self.error))

    def settle(self) -> tuple[int, int]:
        """``(frames sent, frames handled)`` so far (cyclic graphs find quiescence with it)."""
        self._raise()
        return self.frames_sent, self.frames_handled

    def end(self) -> None:
        """Run the end-of-stream step in the worker thread (cyclic graphs, once quiescent)."""
        finished = threading.Event()
        self.inbox.put(("call", lambda: self.on_eof(end_edges=False), finished))
        while not finished.wait(0.05):
            self._raise()
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def report(self):
        """``(stats, logic)``: the logic object is returned for the collector only."""
        self.stats.peak_queue = self.inbox.peak
        self.stats.cpu_ns = time.process_time_ns() - self.cpu0
        return self.stats, (self.logic if self.stats.role == "collector" else None)


def _one_machine() -> bool:
    """Whether every live Ray node is the driver's: then the edges stay on loopback."""
    if ray.util.client.ray.is_connected():  # a Ray client: the driver is elsewhere
        return False
    here = ray.get_runtime_context().get_node_id()
    return all(n["NodeID"] == here for n in ray.nodes() if n["Alive"])


def _ensure_ray(address: str | None) -> None:
    if not ray.is_initialized():
        ray.init(
            address=address,
            num_cpus=None if address else os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )


def _unwrap(err: Exception) -> ActorFailed:
    """An :class:`ActorFailed` with the message the failing actor raised.

    Ray wraps it in a chain of task errors (a failed call) or only in the text of an
    ``ActorDiedError`` (a failed constructor); take the innermost message in either case.
    """
    found = re.findall(r"ActorFailed: (actor '[^\n]*)", str(err))
    if found:
        return ActorFailed(found[0])
    cause = err
    while cause is not None:
        if isinstance(cause, ActorFailed) and cause.args:
            return ActorFailed(str(cause.args[0]).splitlines()[0])
        cause = getattr(cause, "cause", None) or cause.__cause__
    return ActorFailed(f"a Ray actor failed: {err}")


def _diagnose(hosts: dict, err: Exception) -> ActorFailed:
    """The error that ended a run: the failing actor's own, not its neighbours' lost edges.

    A failing actor records its error before it shuts its connections, so once anyone has
    noticed, the cause is on record; an actor that died outright is the cause itself.
    """
    if isinstance(err, ActorFailed) and not isinstance(err, _LostNeighbour):
        return ActorFailed(str(err))
    causes, lost = [], [str(err)] if isinstance(err, ActorFailed) else []
    refs = {name: h.failure.remote() for name, h in hosts.items()}
    deadline = time.monotonic() + FAILURE_WAIT_S
    for name, ref in refs.items():
        try:
            found = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            continue
        except ray.exceptions.RayError as e:
            msg = str(_unwrap(e))
            causes.append(msg if "actor '" in msg else f"actor {name!r} died: {e}")
            continue
        if found is not None:
            (causes if found[0] == "cause" else lost).append(found[1])
    if causes:
        return ActorFailed(causes[0])
    if lost:
        return ActorFailed(lost[0])
    return (
        _unwrap(err)
        if isinstance(err, ray.exceptions.RayError)
        else ActorFailed(f"the run failed: {type(err).__name__}: {err}")
    )


@dataclass(frozen=True)
class Ray(WallClock):
    """The ``ray`` backend: one Ray actor per topology node (see the module docstring).

    Parameters
    ----------
    address : str, optional
        Ray cluster to connect to; default: the running Ray instance, or a local one started
        with this host's CPUs. An instance this run starts stays up for later runs.
    """

    address: str | None = None

    name: ClassVar[str] = "ray"

    def run(
        self,
        query: Query,
        topology: Topology,
        chunks: Iterable[Columns],
        settings: RunSettings,
        progress,
    ) -> RunTrace:
        """Run the topology with one Ray actor per node."""
        progress = progress or Progress(None, enabled=False)
        graph = topology.graph
        emitter = topology.emitter
        with ThreadPoolExecutor(1, thread_name_prefix="warm") as pool:
            # kernels are compiled (or loaded) in this process while Ray starts
            built = pool.submit(_build_driver_side, topology, query, settings, self.address is None)
            _ensure_ray(self.address)
            source = built.result()
        share = max(0.01, min(1.0, (os.cpu_count() or 1) / max(1, graph.number_of_nodes())) / 2)
        hosts = {
            n: _Host.options(num_cpus=share).remote(n, d["config"], query, settings)
            for n, d in graph.nodes(data=True)
            if n != emitter
        }
        loopback = self.address is None and _one_machine()
        try:
            try:
                listening = ray.get([h.listen.remote(loopback) for h in hosts.values()])
            except ray.exceptions.RayError as e:  # a constructor failed: its error, as Ray gave it
                raise _unwrap(e) from None
            addresses = dict(zip(hosts, listening, strict=True))
            if on_listen is not None:
                on_listen(addresses)
            try:
                return _drive(topology, source, hosts, addresses, chunks, progress)
            except (OSError, ray.exceptions.RayError, _LostNeighbour) as e:
                raise _diagnose(hosts, e) from None
        finally:
            source.shut()
            for h in hosts.values():
                ray.kill(h)


def _build_driver_side(
    topology: Topology, query: Query, settings: RunSettings, local: bool
) -> _Node:
    """The emitter's node, which runs in the driver; first, on a ``local`` cluster, the logic
    of one node of each kind (its config decides the kernels it runs), so that every kernel is
    compiled here, once, and the actors started next load them from numba's disk cache, which
    they share with this process.

    With an empty cache each actor would otherwise compile in its constructor, all of them at
    once, those of one kind the same kernels, after Ray has started; here the compiling
    overlaps Ray's start, and no actor starts before the cache is full.
    """
    emitter = topology.emitter
    if local:
        kinds = {repr(topology.config(n)): n for n in topology.graph if n != emitter}
        for n in kinds.values():
            _Node(n, topology.config(n), query, settings)
    return _Node(emitter, topology.config(emitter), query, settings)


def _quiesce(source: _Node, hosts: dict) -> None:
    """Wait until no frame is in flight anywhere (actors that send to each other keep making
    work for one another): until every frame sent was handled and a whole round of counts
    changed nothing. Counters only grow and a frame is counted sent before it can be handled,
    so two equal rounds mean nothing moved in between."""
    previous = None
    while True:
        counts = ray.get([h.settle.remote() for h in hosts.values()])
        sent = source.frames_sent + sum(c[0] for c in counts)
        handled = sum(c[1] for c in counts)
        if sent == handled and (sent, handled) == previous:
            return
        previous = (sent, handled)
        time.sleep(0.001)


def _drive(
    topology: Topology, source: _Node, hosts: dict, addresses: dict, chunks, progress
) -> RunTrace:
    secret = channels.new_secret()  # this run's: actors get it through Ray only
    routes = topology.routes()
    graph = topology.graph

    def outgoing(node: str) -> tuple[dict[str, list], dict]:
        out = {port: dests for (src, port), dests in routes.items() if src == node}
        dests = {d for ds in out.values() for d, _ in ds}
        return out, {d: addresses[d] for d in dests}

    cyclic = topology.cyclic

    def bounded(node: str) -> list[str]:  # senders on no cycle with ``node``: safe to block
        return [u for u in graph.predecessors(node) if not nx.has_path(graph, node, u)]

    ray.get(
        [
            h.start.remote(
                *outgoing(n), sorted(set(graph.predecessors(n))), bounded(n), cyclic, secret
            )
            for n, h in hosts.items()
        ]
    )
    source.open(*outgoing(source.name), secret)
    collector = topology.collector
    clock = time.monotonic_ns
    start_ns = None
    n_in = 0
    for cols in chunks:
        if start_ns is None:
            start_ns = clock()
        source.on_chunk(cols)
        n_in += len(cols)
        progress.update(len(cols))
    if start_ns is None:
        start_ns = clock()
    source.on_eof(end_edges=not cyclic)
    if not cyclic:
        pending = [h.finished.remote() for h in hosts.values()]
        while pending:  # the first failure at once, not after the others
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
    else:
        _quiesce(source, hosts)
        for node in topology.eof_order():
            if node != source.name:
                ray.get(hosts[node].end.remote())
                _quiesce(source, hosts)
    end_ns = clock()
    reports = dict(zip(hosts, ray.get([h.report.remote() for h in hosts.values()]), strict=True))
    actors = {source.name: source.stats, **{n: r[0] for n, r in reports.items()}}
    return RunTrace(
        input_tuples=n_in,
        start_ns=start_ns,
        end_ns=end_ns,
        actors=actors,
        collector=reports[collector][1],
    )
