"""``spo``: SPO-Join's pipeline (Aslam, Simonini & Beedkar §3 Fig. 2): a mutable stage and
PO-Join workers holding the immutable structures."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.router import BroadcastRoute
from streamjoin.actors.spo import MergeSettings, SPOMutableConfig, SPOWorkerConfig, TreePlace
from streamjoin.checks import positive_int
from streamjoin.indexes.po_join import DEFAULT_MERGE_EVERY
from streamjoin.topologies.base import Topology, add_actor, index_options_of


def spo(
    workers: int = 2,
    *,
    merge_every: int | None = None,
    merge_after: int | None = None,
    subintervals: int = 1,
    fanout: int | None = None,
    index_options: dict | None = None,
    **options,
) -> Topology:
    """SPO-Join: every batch goes to a mutable stage and to ``workers`` PO-Join workers.

    The mutable stage keeps the newest tuples in B+-trees (one per served condition, bit
    arrays ANDed) and, every ``merge_every`` stored tuples of a stream (the threshold δ) or once
    its oldest is ``merge_after`` ``ts`` units old, ships them to the next worker, cut into
    ``subintervals`` pieces of consecutive arrivals dealt round robin (the paper's sub-interval
    division for large δ). Each worker builds a PO-Join (IE-Join) structure per piece and
    probes every batch against its linked set; the oldest structure leaves whole. The answer
    is exact under any interleaving of the edges (see :mod:`streamjoin.actors.spo`).

    Parameters
    ----------
    workers : int
        PO-Join workers.
    merge_every : int, optional
        δ in tuples (default ``po_join``'s ``DEFAULT_MERGE_EVERY`` unless ``merge_after`` is given).
    merge_after : int, optional
        δ in ``ts`` units (time), alone or with ``merge_every`` (whichever comes first).
    subintervals : int
        Pieces each merge is cut into.
    fanout : int, optional
        With ``d``, the workers form a broadcast tree and a combining tree of degree ``d``
        (:mod:`streamjoin.actors.spo`): the emitter sends each batch to the mutable stage
        and one worker, each worker passes it on to at most ``d`` others and combines the
        pairs of at most ``d`` others, and the collector gets one message per batch from
        the workers. ``None`` (default): every batch from the emitter to every worker and
        each worker's pairs to the collector, as SPO-Join's Alg. 1 has it, for up to
        :data:`DIRECT_WORKERS` workers, and a tree of degree :data:`DEFAULT_FANOUT` beyond.
        ``0`` forces the direct layout.
    index_options : dict, optional
        Options of the mutable part's ``po_join`` index (``intersect``, ``fanout``,
        ``leaf_size``); ``**options`` are added to them.
    """
    positive_int("workers", workers)
    if fanout is None:
        fanout = 0 if workers <= DIRECT_WORKERS else DEFAULT_FANOUT
    elif isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 0:
        raise ValueError(f"fanout must be a non-negative integer or None, got {fanout!r}")
    if merge_every is None and merge_after is None:
        merge_every = DEFAULT_MERGE_EVERY
    merge = MergeSettings(merge_every, merge_after, subintervals)
    opts = index_options_of("po_join", index_options, options)
    if "merge_every" in opts or "subintervals" in opts:
        raise ValueError("give merge_every and subintervals to spo() itself, not as index options")
    g = nx.MultiDiGraph(self_join=True)
    mid = (workers - 1) / 2
    fed = range(workers) if not fanout else range(1)  # workers the emitter sends to
    ports = ("mutable", *(f"w{k}" for k in fed))
    add_actor(g, "emitter", EmitterConfig(BroadcastRoute(ports)), pos=(0, -mid), label="emitter")
    # the mutable stage above the column of workers, the collector level with it on the right
    every = f"δ={merge_every}" if merge_every else f"δ={merge_after} ts"
    add_actor(
        g,
        "mutable",
        SPOMutableConfig(workers, merge, opts),
        pos=(1, 1.2),
        label=f"mutable\n{every}",
    )
    add_actor(g, "collector", CollectorConfig(), pos=(3.2, 1.2), label="collector")
    g.add_edge("emitter", "mutable", src_port="mutable", dst_port="in", label="R+S")
    g.add_edge("mutable", "collector", src_port="out", dst_port="in", label="pairs")
    for k in range(workers):
        name = f"worker{k}"
        place = TreePlace()
        if fanout:
            down = [c for c in range(workers) if broadcast_parent(c, fanout) == k]
            below = [c for c in range(workers) if combine_parent(c, workers, fanout) == k]
            place = TreePlace(len(down), len(below), k != workers - 1)
        config = SPOWorkerConfig(k, workers, merge, place)
        add_actor(g, name, config, pos=(2.1, -k), label=f"PO-Join\nworker {k}")
        g.add_edge("mutable", name, src_port=f"w{k}", dst_port="runs", label="merges")
        if not fanout:
            g.add_edge("emitter", name, src_port=f"w{k}", dst_port="in", label="R+S")
            g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
            continue
        if k == 0:
            g.add_edge("emitter", name, src_port="w0", dst_port="in", label="R+S")
        for i, c in enumerate(down):
            g.add_edge(name, f"worker{c}", src_port=f"down{i}", dst_port="in", label="R+S")
        up = combine_parent(k, workers, fanout)
        if up is None:
            g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
        else:
            slot = (workers - 2 - k) % fanout
            g.add_edge(name, f"worker{up}", src_port="out", dst_port=f"sub{slot}", label="pairs")
    tree = f", fanout {fanout}" if fanout else ""
    return Topology(f"spo({workers} workers, {every}{tree})", g)


#: ``spo``'s default layout: the emitter feeds up to this many workers directly, more through
#: trees of degree :data:`DEFAULT_FANOUT`. Simulated (Q1, W = 2^20 per stream, δ = 2^14,
#: the shipped profile), direct feeding peaked at 4 workers, where the emitter's sends and the
#: collector's receives (one per worker and batch) begin to bind.
DIRECT_WORKERS = 4
#: Degree of the trees: each worker passes batches on to, and combines the pairs of, at most
#: this many others.
DEFAULT_FANOUT = 2


def broadcast_parent(k: int, fanout: int) -> int | None:
    """The worker that passes batches on to worker ``k`` (None: the emitter feeds it): a
    ``fanout``-ary heap over the worker numbers, rooted at worker 0."""
    return None if k == 0 else (k - 1) // fanout


def combine_parent(k: int, workers: int, fanout: int) -> int | None:
    """The worker that worker ``k`` reports its pairs to (None: the collector): the same heap
    mirrored, rooted at the last worker, so that, as in the broadcast tree, every edge goes to
    a higher-numbered worker and the graph stays acyclic."""
    j = workers - 1 - k
    return None if j == 0 else workers - 1 - (j - 1) // fanout
