"""The ``local`` executor: every actor in this process, deterministic FIFO delivery."""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from streamjoin.actors import passes_on
from streamjoin.actors.base import RunSettings
from streamjoin.batch import MARKER_PORT, Marker
from streamjoin.query import Query
from streamjoin.runtime.executor import RunTimeout, WallClock
from streamjoin.runtime.markers import MarkerGate, marker_step
from streamjoin.runtime.pipeline import Progress
from streamjoin.runtime.trace import ActorStats, RunTrace, newest_ingest
from streamjoin.topologies.base import Topology
from streamjoin.validation import Columns

#: a step's ``lag_of`` for a chunk: handed over as the step begins
CHUNK = object()


@dataclass(frozen=True)
class Local(WallClock):
    """The ``local`` backend: every actor in this process (for tests and small runs).

    Parameters
    ----------
    delivery_seed : int, optional
        Deliver messages in a seeded random order that keeps each sender → receiver link
        FIFO (what Ray promises: calls of one submitter to one actor run in order), and only
        some of them before the next chunk: a test of a topology against the interleavings
        other executors may produce. Default: every message a chunk causes is delivered in
        FIFO order before the next chunk is read.
    """

    delivery_seed: int | None = None

    name: ClassVar[str] = "local"

    def run(
        self,
        query: Query,
        topology: Topology,
        chunks: Iterable[Columns],
        settings: RunSettings,
        progress,
    ) -> RunTrace:
        """Drive ``chunks`` through ``topology``: each chunk goes to the emitter, then the
        messages it causes are delivered (see ``delivery_seed``)."""
        progress = progress or Progress(None, enabled=False)
        clock = time.monotonic_ns
        graph = topology.graph
        actors = {n: d["config"].build(query, settings, clock) for n, d in graph.nodes(data=True)}
        stats = {n: ActorStats(role=d["role"]) for n, d in graph.nodes(data=True)}
        routes = topology.routes()
        marker_routes = topology.marker_routes()
        gates = {
            n: MarkerGate(dict.fromkeys(graph.predecessors(n)))
            for n in graph.nodes
            if not topology.config(n).passes_markers  # (its logic takes them as messages)
        }
        emitter = topology.emitter
        collector = topology.collector
        queue = _Mailboxes(self.delivery_seed)
        waiting = dict.fromkeys(stats, 0)  # messages in the queue per receiver

        def deliver(src: str, messages) -> None:
            st = stats[src]
            for port, msg in messages:
                st.batches_out += 1
                st.tuples_out += len(msg)
                dests = marker_routes[src] if port == MARKER_PORT else routes.get((src, port), ())
                for dst, dst_port in dests:
                    queue.push((src, dst), (dst_port, msg))
                    waiting[dst] += 1
                    if waiting[dst] > stats[dst].peak_queue:
                        stats[dst].peak_queue = waiting[dst]

        deadline = None if settings.timeout is None else time.monotonic() + settings.timeout

        def step(node: str, call, *args, lag_of=None) -> None:
            """``call(*args)`` as ``node``'s step; ``lag_of``: the message whose tuples its
            lags count from (``ActorStats.lag``), or ``CHUNK`` for one handed over as it
            begins."""
            if deadline is not None and time.monotonic() > deadline:
                busy = [f"{node!r} ({stats[node].role}: about to step)"] + [
                    f"{n!r} ({stats[n].role}: {k} messages waiting)"
                    for n, k in waiting.items()
                    if k and n != node
                ]
                raise RunTimeout(
                    f"the run did not end within timeout={settings.timeout} s; still busy: "
                    + ", ".join(busy)
                )
            t0, start, c0 = time.perf_counter_ns(), clock(), time.thread_time_ns()
            out = call(*args)
            stats[node].busy_ns += time.perf_counter_ns() - t0
            if lag_of is not None:
                newest = start if lag_of is CHUNK else newest_ingest(lag_of)
                stats[node].lag(newest, start, clock(), time.thread_time_ns() - c0)
            deliver(node, out)

        def drain(limit: int | None = None) -> None:
            while queue and (limit is None or limit > 0):
                (src, dst), (port, msg) = queue.pop()
                waiting[dst] -= 1
                if limit is not None:
                    limit -= 1
                if isinstance(msg, Marker) and dst in gates:
                    passed = gates[dst].take(src, msg)
                    if passed is not None:
                        step(dst, marker_step, actors[dst], passed)
                    continue
                st = stats[dst]
                st.batches_in += 1
                st.tuples_in += len(msg)
                deliver(dst, passes_on(actors[dst], port, msg))  # before the step (§III-C)
                step(dst, actors[dst].on_batch, port, msg, lag_of=msg)
                if not waiting[dst] and actors[dst].held_batches:  # nothing waits: flush
                    step(dst, actors[dst].on_idle)

        start_ns = None
        n_in = 0
        for cols in chunks:
            if start_ns is None:
                start_ns = clock()
            stats[emitter].tuples_in += len(cols)
            step(emitter, actors[emitter].on_chunk, cols, lag_of=CHUNK)
            drain(queue.some())
            n_in += len(cols)
            progress.update(len(cols))
        if start_ns is None:
            start_ns = clock()
        step(emitter, actors[emitter].on_eof)
        drain()
        for node in topology.eof_order():
            if node != emitter:
                step(node, actors[node].on_eof)
                drain()
        end_ns = clock()
        return RunTrace(
            input_tuples=n_in,
            start_ns=start_ns,
            end_ns=end_ns,
            actors=stats,
            collector=actors[collector],
        )


class _Mailboxes:
    """Messages in flight: one FIFO queue, or (with a seed) one FIFO queue per sender →
    receiver link, served in a random order."""

    def __init__(self, seed: int | None) -> None:
        self.rng = None if seed is None else random.Random(seed)
        self.edges: dict[tuple, deque] = {}
        self.fifo: deque = deque()
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def push(self, edge: tuple, msg) -> None:
        if self.rng is None:
            self.fifo.append((edge, msg))
        else:
            self.edges.setdefault(edge, deque()).append(msg)
        self.n += 1

    def pop(self):
        self.n -= 1
        if self.rng is None:
            return self.fifo.popleft()
        edge = self.rng.choice([e for e, q in self.edges.items() if q])
        return edge, self.edges[edge].popleft()

    def some(self) -> int | None:
        """How many to deliver before the next chunk: all (None), or a random share."""
        return None if self.rng is None else self.rng.randint(0, self.n)
