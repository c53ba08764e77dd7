"""The ``ray`` executor: one Ray actor per topology node, running the same logic objects.

- Each node's logic (:mod:`streamjoin.actors`) is built inside a :class:`_Host` actor; kernels
  are warmed in its constructor (numba's disk cache makes that a load, not a compile). The
  emitter runs in the driver, next to the source.
- An actor sends each output message to the downstream hosts with ``.remote`` calls. Ray runs
  the calls of one submitter to a synchronous actor in submission order, so every edge is
  FIFO.
- Backpressure: a host keeps at most ``max_in_flight`` unfinished calls per run and waits
  for the oldest before sending more (the emitter in the driver too), so memory
  stays bounded when the source is faster than the join.
- End of stream goes through the graph in topological order; each host first waits for all
  its outstanding calls, which also surfaces any downstream exception. Actors that call each
  other (handshake neighbours) never block on a send, and the end is found by quiescence.
- Any exception in an actor ends the run with :class:`ActorFailed` naming the actor, and all
  actors are killed: never a hang, never a short result.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable

import ray

from streamjoin.batch import Columns
from streamjoin.query import Query
from streamjoin.runtime.build import Settings, build_actor
from streamjoin.runtime.trace import ActorStats, RunTrace
from streamjoin.topologies.base import Topology

MAX_IN_FLIGHT = 4


class ActorFailed(RuntimeError):
    """An actor raised; the message names the actor and its exception."""


class _Node:
    """One topology node: its logic object, its outgoing routes and the calls in flight.

    Runs inside a Ray actor (:class:`_Host`), or in the driver for the emitter, which saves a
    process and a copy of every input batch.
    """

    def __init__(self, name: str, role: str, config: dict, query: Query, settings: Settings):
        self.name = name
        self.stats = ActorStats(role=role)
        self.routes: dict[str, list] = {}
        self.in_flight: list = []
        self.bounded = True
        self.calls_sent = 0
        self.calls_received = 0
        self.logic = self._guard(build_actor, role, config, query, settings, time.monotonic_ns)

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise ActorFailed(f"actor {self.name!r} ({self.stats.role}) failed: "
                              f"{type(e).__name__}: {e}") from e  # fmt: skip

    def ready(self) -> bool:
        return True

    def connect(self, routes: dict[str, list], bounded: bool = True) -> None:
        """``routes[out_port] = [(handle, dst_port), …]``. ``bounded=False`` for actors that
        call each other (a cyclic graph): waiting on a neighbour that waits on us would
        deadlock, so those never block on a send."""
        self.routes = routes
        self.bounded = bounded

    def _send(self, messages) -> None:
        for port, msg in messages:
            self.stats.batches_out += 1
            self.stats.tuples_out += len(msg)
            for handle, dst_port in self.routes.get(port, ()):
                self.in_flight.append(handle.on_batch.remote(dst_port, msg))
                self.calls_sent += 1
        if not self.bounded:
            if len(self.in_flight) > 64:  # forget finished calls, surfacing their errors
                done, self.in_flight = ray.wait(
                    self.in_flight, num_returns=len(self.in_flight), timeout=0
                )
                ray.get(done)
        elif len(self.in_flight) > MAX_IN_FLIGHT:
            done, self.in_flight = ray.wait(
                self.in_flight, num_returns=len(self.in_flight) - MAX_IN_FLIGHT
            )
            ray.get(done)  # re-raises a downstream failure here
        self.stats.peak_queue = max(self.stats.peak_queue, len(self.in_flight))

    def _step(self, fn, *args) -> None:
        t0 = time.perf_counter_ns()
        out = self._guard(fn, *args)
        self.stats.busy_ns += time.perf_counter_ns() - t0
        self._send(out)

    def on_batch(self, port: str, msg) -> None:
        self.calls_received += 1
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
        """Wait for every call this node made; returns ``(calls sent, calls received)``."""
        ray.get(self.in_flight)
        self.in_flight = []
        return self.calls_sent, self.calls_received

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
        return _drive(topology, source, hosts, chunks, progress)
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

    def outgoing(node: str) -> dict[str, list]:
        return {port: [(hosts[d], dp) for d, dp in dests]
                for (src, port), dests in routes.items() if src == node}  # fmt: skip

    source.connect(outgoing(source.name))
    bounded = not topology.cyclic
    ray.get([h.connect.remote(outgoing(n), bounded) for n, h in hosts.items()])
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
