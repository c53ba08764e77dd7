"""``spo``: SPO-Join's pipeline (Aslam, Simonini & Beedkar §3 Fig. 2): a mutable stage and
PO-Join workers holding the immutable structures."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.router import BroadcastRoute
from streamjoin.actors.spo import MergeSettings, SPOMutableConfig, SPOWorkerConfig
from streamjoin.checks import positive_int
from streamjoin.indexes.po_join import DEFAULT_MERGE_EVERY
from streamjoin.topologies.base import Topology, add_actor, index_options_of


def spo(
    workers: int = 2,
    *,
    merge_every: int | None = None,
    merge_after: int | None = None,
    subintervals: int = 1,
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
    index_options : dict, optional
        Options of the mutable part's ``po_join`` index (``intersect``, ``fanout``,
        ``leaf_size``); ``**options`` are added to them.
    """
    positive_int("workers", workers)
    if merge_every is None and merge_after is None:
        merge_every = DEFAULT_MERGE_EVERY
    merge = MergeSettings(merge_every, merge_after, subintervals)
    opts = index_options_of("po_join", index_options, options)
    if "merge_every" in opts or "subintervals" in opts:
        raise ValueError("give merge_every and subintervals to spo() itself, not as index options")
    g = nx.MultiDiGraph(self_join=True)
    mid = (workers - 1) / 2
    ports = ("mutable", *(f"w{k}" for k in range(workers)))
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
        config = SPOWorkerConfig(k, workers, merge)
        add_actor(g, name, config, pos=(2.1, -k), label=f"PO-Join\nworker {k}")
        g.add_edge("emitter", name, src_port=f"w{k}", dst_port="in", label="R+S")
        g.add_edge("mutable", name, src_port=f"w{k}", dst_port="runs", label="merges")
        g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"spo({workers} workers, {every})", g)
