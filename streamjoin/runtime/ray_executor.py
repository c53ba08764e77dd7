"""The ``ray`` executor: one Ray actor per topology node, running the same logic objects.

- Each node's logic (:mod:`streamjoin.actors`) is built inside a :class:`_Host` actor; kernels
  are warmed in its constructor (numba's disk cache makes that a load, not a compile). The
  emitter runs in the driver, next to the source.
- A node sends its output to each downstream host with ``on_messages.remote`` calls. Ray runs
  the calls of one submitter to a synchronous actor in submission order, so every edge is
  FIFO.
- **Coalescing.** A Ray call costs far more than a small batch's join (about 1 ms of this
  machine's two cores), so a node keeps at most ``PIPELINE`` calls in flight per destination:
  while they run, further messages for it are held in an :class:`_Outbox` and leave as one
  call when one completes (a flusher thread waits for that), consecutive batches for one port
  concatenated where the receiver's answer cannot change (:func:`_mergeable`). A held message
  waits no longer than the destination is busy with earlier calls of this sender — time it
  would otherwise spend queued there — plus a flusher poll (``FLUSH_POLL_S``). Under light
  load every message leaves at once; under heavy load calls grow instead of multiplying.
- Backpressure: a sender whose outbox for a busy destination is full (``MAX_HELD`` messages,
  or a full merged batch) waits for it, the emitter in the driver too, so memory stays
  bounded when the source is faster than the join. Actors that call each other (handshake
  neighbours) never wait on a send: a neighbour that waits on us would deadlock.
- End of stream goes through the graph in topological order; each host first flushes what it
  holds and waits for all its outstanding calls, which also surfaces any downstream
  exception; in a cyclic graph the end is found by quiescence.
- Any exception in an actor ends the run with :class:`ActorFailed` naming the actor, and all
  actors are killed: never a hang, never a short result.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable

import ray

from streamjoin.actors.window_part import concat_pairs
from streamjoin.batch import Batch, Columns, PairBatch
from streamjoin.query import Query
from streamjoin.runtime.build import Settings, build_actor
from streamjoin.runtime.trace import ActorStats, RunTrace
from streamjoin.topologies.base import Topology

#: calls one sender keeps in flight to one destination before it holds further messages
PIPELINE = 2
#: messages a bounded sender holds for one busy destination before it waits for it (it also
#: waits once it holds a full merged batch: see ``MERGE_TUPLES``)
MAX_HELD = 16
#: held batches are concatenated up to this many tuples (or the run's batch size, if larger)
MERGE_TUPLES = 4096
#: seconds the flusher waits for a destination before it looks at its outboxes again
FLUSH_POLL_S = 0.002
#: roles whose ``on_batch`` gives the same answer for two consecutive batches of one port
#: as for their concatenation (DESIGN §2: any batch boundaries, seq order and the later
#: horizon kept); handshake cores count batches, PanJoin workers take commands
_CONCAT_ROLES = ("join_core", "manager")


class ActorFailed(RuntimeError):
    """An actor raised; the message names the actor and its exception."""


def _mergeable(role: str, group: list, msg, max_tuples: int) -> bool:
    """Whether ``msg`` may join ``group`` (messages for one port of a ``role`` node, in order)
    as one message; batches grow to ``max_tuples`` at most."""
    last = group[-1]
    if isinstance(last, PairBatch) and isinstance(msg, PairBatch):
        return True  # result pairs: the collector only counts and stamps them
    return (
        role in _CONCAT_ROLES
        and isinstance(last, Batch)
        and isinstance(msg, Batch)
        and last.store == msg.store
        and sum(len(b) for b in group) + len(msg) <= max_tuples
    )


def _merge(group: list):
    if len(group) == 1:
        return group[0]
    if isinstance(group[0], PairBatch):
        return concat_pairs(group)
    return Batch.concat(group).with_store(group[0].store)


class _Outbox:
    """What one node sends one destination: the calls in flight and the messages held.

    ``held`` is a list of ``[port, [messages]]`` groups; consecutive mergeable messages for one
    port share a group and leave as one message.
    """

    def __init__(self, handle, role: str, max_tuples: int) -> None:
        self.handle = handle
        self.role = role
        self.max_tuples = max_tuples
        self.in_flight: list = []
        self.held: list[list] = []
        self.n_held = 0
        self.held_tuples = 0

    def hold(self, port: str, msg) -> None:
        self.n_held += 1
        self.held_tuples += len(msg)
        if self.held:
            last_port, group = self.held[-1]
            if last_port == port and _mergeable(self.role, group, msg, self.max_tuples):
                group.append(msg)
                return
        self.held.append([port, [msg]])

    def reap(self) -> None:
        """Forget finished calls, re-raising a failure of the destination."""
        if self.in_flight:
            done, self.in_flight = ray.wait(
                self.in_flight, num_returns=len(self.in_flight), timeout=0, fetch_local=False
            )
            ray.get(done)

    def submit(self) -> None:
        msgs = [(port, _merge(group)) for port, group in self.held]
        self.in_flight.append(self.handle.on_messages.remote(msgs))
        self.held, self.n_held, self.held_tuples = [], 0, 0

    @property
    def full(self) -> bool:
        return self.n_held >= MAX_HELD or self.held_tuples >= self.max_tuples


class _Node:
    """One topology node: its logic object, its outboxes and the thread that flushes them.

    Runs inside a Ray actor (:class:`_Host`), or in the driver for the emitter, which saves a
    process and a copy of every input batch. The logic object is only ever called from the
    thread that received the message; the flusher thread only submits held messages.
    """

    def __init__(self, name: str, role: str, config: dict, query: Query, settings: Settings):
        self.name = name
        self.stats = ActorStats(role=role)
        self.routes: dict[str, list] = {}
        self.outboxes: dict[str, _Outbox] = {}
        self.bounded = True
        self.calls_sent = 0
        self.calls_received = 0
        self.lock = threading.Condition()
        self.error: BaseException | None = None
        self.closed = False
        self.flusher: threading.Thread | None = None
        self.merge_tuples = max(settings.batch_size, MERGE_TUPLES)
        self.logic = self._guard(build_actor, role, config, query, settings, time.monotonic_ns)

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise ActorFailed(f"actor {self.name!r} ({self.stats.role}) failed: "
                              f"{type(e).__name__}: {e}") from e  # fmt: skip

    def ready(self) -> bool:
        return True

    def connect(self, routes: dict[str, list], handles: dict, bounded: bool = True) -> None:
        """``routes[out_port] = [(dest, dst_port), …]``, ``handles[dest] = (handle, role)``.
        ``bounded=False`` for actors that call each other (a cyclic graph): waiting on a
        neighbour that waits on us would deadlock, so those never block on a send."""
        self.routes = routes
        self.outboxes = {d: _Outbox(h, role, self.merge_tuples) for d, (h, role) in handles.items()}
        self.bounded = bounded
        self.flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                        name=f"flush-{self.name}")  # fmt: skip
        self.flusher.start()

    # -- sending ------------------------------------------------------------------------------

    def _send(self, messages) -> None:
        with self.lock:
            self._raise_error()
            for port, msg in messages:
                self.stats.batches_out += 1
                self.stats.tuples_out += len(msg)
                for dest, dst_port in self.routes.get(port, ()):
                    self.outboxes[dest].hold(dst_port, msg)
            waiting = False
            for box in self.outboxes.values():
                if box.held:
                    self._pump(box)
                    waiting = waiting or bool(box.held)
            queued = sum(len(b.in_flight) + b.n_held for b in self.outboxes.values())
            self.stats.peak_queue = max(self.stats.peak_queue, queued)
            if waiting:
                self.lock.notify()

    def _pump(self, box: _Outbox, force: bool = False) -> None:
        """Send what ``box`` holds if its destination is free (or ``force``); a bounded sender
        whose box is full waits for the destination first. Lock held."""
        if len(box.in_flight) >= PIPELINE:  # a ray.wait costs tens of µs: only when it may
            box.reap()
        if box.in_flight and self.bounded and box.full:
            ray.get(box.in_flight)  # backpressure; re-raises a downstream failure
            box.in_flight = []
        if box.held and (force or len(box.in_flight) < PIPELINE):
            box.submit()
            self.calls_sent += 1

    def _flush_loop(self) -> None:
        """Submit held messages as soon as their destination has finished its calls."""
        while True:
            with self.lock:
                while not self.closed and (
                    self.error or not any(b.held for b in self.outboxes.values())
                ):
                    self.lock.wait()
                if self.closed:
                    return
                busy = [b.in_flight[0] for b in self.outboxes.values() if b.held and b.in_flight]
            if busy:  # one submitter's calls run in order: the oldest finishes first
                ray.wait(busy, num_returns=1, timeout=FLUSH_POLL_S, fetch_local=False)
            with self.lock:
                try:
                    for box in self.outboxes.values():
                        if box.held:
                            self._pump(box)
                except Exception as e:  # a destination failed: raised by the node's thread
                    self.error = e

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    # -- entry points -------------------------------------------------------------------------

    def _step(self, fn, *args) -> None:
        t0 = time.perf_counter_ns()
        out = self._guard(fn, *args)
        self.stats.busy_ns += time.perf_counter_ns() - t0
        self._send(out)

    def on_messages(self, msgs: list) -> None:
        """One call: ``[(port, message), …]`` from one sender, in its order."""
        self.calls_received += 1
        for port, msg in msgs:
            self.stats.batches_in += 1
            self.stats.tuples_in += len(msg)
            self._step(self.logic.on_batch, port, msg)

    def on_chunk(self, cols: Columns) -> None:
        self.stats.tuples_in += len(cols)
        self._step(self.logic.on_chunk, cols)

    def on_eof(self) -> None:
        self._step(self.logic.on_eof)
        self.settle()

    def settle(self) -> tuple[int, int]:
        """Send everything held and wait for every call this node made; returns
        ``(calls sent, calls received)``."""
        with self.lock:
            self._raise_error()
            for box in self.outboxes.values():
                self._pump(box, force=True)
            pending = [ref for box in self.outboxes.values() for ref in box.in_flight]
            for box in self.outboxes.values():
                box.in_flight = []
        ray.get(pending)
        return self.calls_sent, self.calls_received

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify()

    def report(self):
        """``(stats, logic)``: the logic object is returned for the collector only."""
        return self.stats, (self.logic if self.stats.role == "collector" else None)


@ray.remote(max_restarts=0, max_task_retries=0)
class _Host(_Node):
    """A node in its own Ray actor."""


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


def run_ray(
    query: Query,
    topology: Topology,
    chunks: Iterable[Columns],
    settings: Settings,
    progress,
    address: str | None = None,
) -> RunTrace:
    """Run the topology with one Ray actor per node (see module docstring)."""
    _ensure_ray(address)
    graph = topology.graph
    (emitter,) = topology.nodes("emitter")
    share = max(0.01, min(1.0, (os.cpu_count() or 1) / max(1, graph.number_of_nodes())) / 2)
    hosts = {
        n: _Host.options(num_cpus=share).remote(n, d["role"], d["config"], query, settings)
        for n, d in graph.nodes(data=True)
        if n != emitter
    }
    try:
        source = _Node(emitter, "emitter", graph.nodes[emitter]["config"], query, settings)
        try:
            return _drive(topology, source, hosts, chunks, progress)
        finally:
            source.close()
    except ray.exceptions.RayError as e:
        raise _unwrap(e) from None
    finally:
        for h in hosts.values():
            ray.kill(h)


def _quiesce(source: _Node, hosts: dict) -> None:
    """Wait until no message is in flight anywhere (actors that call each other keep making
    work for one another): settle the hosts one at a time — at once, two settling neighbours
    would each wait on a call queued behind the other — until every call sent was received
    and a whole round changed nothing."""
    previous = None
    while True:
        counts = [ray.get(h.settle.remote()) for h in hosts.values()]
        sent = source.calls_sent + sum(c[0] for c in counts)
        received = sum(c[1] for c in counts)
        if sent == received and (sent, received) == previous:
            return
        previous = (sent, received)


def _drive(topology: Topology, source: _Node, hosts: dict, chunks, progress) -> RunTrace:
    ray.get([h.ready.remote() for h in hosts.values()])  # constructors (and warm-up) done
    routes = topology.routes()

    graph = topology.graph

    def outgoing(node: str) -> tuple[dict[str, list], dict]:
        out = {port: dests for (src, port), dests in routes.items() if src == node}
        dests = {d for ds in out.values() for d, _ in ds}
        return out, {d: (hosts[d], graph.nodes[d]["role"]) for d in dests}

    bounded = not topology.cyclic
    source.connect(*outgoing(source.name))  # nobody sends to the source: it may always wait
    ray.get([h.connect.remote(*outgoing(n), bounded) for n, h in hosts.items()])
    (collector,) = topology.nodes("collector")
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
    source.on_eof()
    if topology.cyclic:
        _quiesce(source, hosts)
    for node in topology.eof_order():
        if node != source.name:
            ray.get(hosts[node].on_eof.remote())
    end_ns = clock()
    reports = dict(zip(hosts, ray.get([h.report.remote() for h in hosts.values()]), strict=True))
    actors = {source.name: source.stats, **{n: r[0] for n, r in reports.items()}}
    return RunTrace(
        input_tuples=n_in, start_ns=start_ns, end_ns=end_ns, actors=actors,
        collector=reports[collector][1],
    )  # fmt: skip
