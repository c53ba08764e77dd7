"""The ``local`` executor: every actor in this process, deterministic FIFO delivery."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable

import networkx as nx

from streamjoin.batch import Columns
from streamjoin.query import Query
from streamjoin.runtime.build import Settings, build_actor
from streamjoin.runtime.trace import ActorStats, RunTrace
from streamjoin.topologies.base import Topology


def run_local(
    query: Query, topology: Topology, chunks: Iterable[Columns], settings: Settings, progress
) -> RunTrace:
    """Drive ``chunks`` through ``topology``: each chunk goes to the emitter, then every message
    it causes is delivered in FIFO order before the next chunk is read."""
    clock = time.monotonic_ns
    graph = topology.graph
    actors = {
        n: build_actor(d["role"], d["config"], query, settings, clock)
        for n, d in graph.nodes(data=True)
    }
    stats = {n: ActorStats(role=d["role"]) for n, d in graph.nodes(data=True)}
    routes = topology.routes()
    (emitter,) = topology.nodes("emitter")
    (collector,) = topology.nodes("collector")
    queue: deque = deque()

    def deliver(src: str, messages) -> None:
        st = stats[src]
        for port, msg in messages:
            st.batches_out += 1
            st.tuples_out += len(msg)
            for dst, dst_port in routes.get((src, port), ()):
                queue.append((dst, dst_port, msg))
        peak = len(queue)
        if peak > st.peak_queue:
            st.peak_queue = peak

    def step(node: str, call, *args) -> None:
        t0 = time.perf_counter_ns()
        out = call(*args)
        stats[node].busy_ns += time.perf_counter_ns() - t0
        deliver(node, out)

    def drain() -> None:
        while queue:
            dst, port, msg = queue.popleft()
            st = stats[dst]
            st.batches_in += 1
            st.tuples_in += len(msg)
            step(dst, actors[dst].on_batch, port, msg)

    start_ns = None
    n_in = 0
    for cols in chunks:
        if start_ns is None:
            start_ns = clock()
        stats[emitter].tuples_in += len(cols)
        step(emitter, actors[emitter].on_chunk, cols)
        drain()
        n_in += len(cols)
        progress.update(len(cols))
    if start_ns is None:
        start_ns = clock()
    step(emitter, actors[emitter].on_eof)
    drain()
    for node in nx.topological_sort(graph):
        if node != emitter:
            step(node, actors[node].on_eof)
            drain()
    end_ns = clock()
    return RunTrace(
        input_tuples=n_in, start_ns=start_ns, end_ns=end_ns, actors=stats,
        collector=actors[collector],
    )  # fmt: skip
