"""``spo``: SPO-Join's pipeline (Aslam, Simonini & Beedkar §3 Fig. 2): a mutable stage and
PO-Join workers holding the immutable structures."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.router import BroadcastRoute
from streamjoin.actors.spo import MergeSettings, SPOMutableConfig, SPOWorkerConfig, TreePlace
from streamjoin.checks import positive_int
from streamjoin.indexes.spo.po_join import DEFAULT_MERGE_EVERY
from streamjoin.topologies.base import Topology, add_actor, check_actors, index_options_of


def spo(
    workers: int = 2,
    *,
    merge_every: int | None = None,
    merge_after: int | None = None,
    subintervals: int = 1,
    relay: int | None = None,
    combine: int | None = None,
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
        PO-Join workers; with the emitter, the mutable stage and the collector at most
        :data:`~streamjoin.topologies.base.MAX_ACTORS` actors.
    merge_every : int, optional
        δ in tuples (default ``po_join``'s ``DEFAULT_MERGE_EVERY`` unless ``merge_after`` is given).
    merge_after : int, optional
        δ in ``ts`` units (time), alone or with ``merge_every`` (whichever comes first).
    subintervals : int
        Pieces each merge is cut into.
    relay : int, optional
        With ``d > 0``, the emitter sends each batch to the mutable stage and one worker, and
        the workers pass it on along a broadcast tree of degree ``d``
        (:mod:`streamjoin.actors.spo`). ``0``: the emitter sends every batch to every worker,
        as SPO-Join's Alg. 1 has it. ``None`` (default): :func:`default_degrees`.
    combine : int, optional
        With ``d > 0``, the workers combine their pairs along a tree of degree ``d`` and the
        collector gets one message per batch from them; ``0``: each worker sends its pairs to
        the collector. ``None`` (default): :func:`default_degrees`.
    index_options : dict, optional
        Options of the mutable part's ``po_join`` index (``intersect``, ``fanout``,
        ``leaf_size``); ``**options`` are added to them.
    """
    positive_int("workers", workers)
    check_actors(f"spo({workers})", workers + 3)
    relay, combine = default_degrees(workers, relay, combine)
    if merge_every is None and merge_after is None:
        merge_every = DEFAULT_MERGE_EVERY
    merge = MergeSettings(merge_every, merge_after, subintervals)
    opts = index_options_of("po_join", index_options, options)
    if "merge_every" in opts or "subintervals" in opts:
        raise ValueError("give merge_every and subintervals to spo() itself, not as index options")
    g = nx.MultiDiGraph(self_join=True)
    mid = (workers - 1) / 2
    fed = range(workers) if not relay else range(1)  # workers the emitter sends to
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
    # each worker's children in both trees, in one pass (their order numbers the ports)
    down: list[list[int]] = [[] for _ in range(workers)]
    below: list[list[int]] = [[] for _ in range(workers)]
    for c in range(workers):
        if relay and (p := broadcast_parent(c, relay)) is not None:
            down[p].append(c)
        if combine and (p := combine_parent(c, workers, combine)) is not None:
            below[p].append(c)
    for k in range(workers):
        name = f"worker{k}"
        up = combine_parent(k, workers, combine) if combine else None
        place = TreePlace(len(down[k]), len(below[k]), up is not None)
        add_actor(
            g,
            name,
            SPOWorkerConfig(k, workers, merge, place),
            pos=(2.1, -k),
            label=f"PO-Join\nworker {k}",
        )
        g.add_edge("mutable", name, src_port=f"w{k}", dst_port="runs", label="merges")
        if not relay or k == 0:
            g.add_edge("emitter", name, src_port=f"w{k}", dst_port="in", label="R+S")
        for i, c in enumerate(down[k]):
            g.add_edge(name, f"worker{c}", src_port=f"down{i}", dst_port="in", label="R+S")
        if up is None:
            g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
        else:
            slot = below[up].index(k)
            g.add_edge(name, f"worker{up}", src_port="out", dst_port=f"sub{slot}", label="pairs")
    trees = (f", relay {relay}" if relay else "") + (f", combine {combine}" if combine else "")
    return Topology(f"spo({workers} workers, {every}{trees})", g)


#: ``spo``'s default layout (:func:`default_degrees`): direct up to this many workers, trees
#: beyond. Past a few workers the emitter's sends and the collector's receives, one per
#: worker and batch, cost more than the messages the trees add at each worker; where the
#: trees overtake depends on what a message costs against a probe. On the simulator (Q1,
#: W = 2^20, δ = 2^14) with a profile fitted on the development VM, direct led at 12 workers
#: and the trees at 16, so the curve rises at every worker count
#: (``experiments/results/spo_paper_scale.md``); on the shipped profile, fitted when messages
#: cost several times more, the trees led at 12 already.
DIRECT_WORKERS = 12
#: Degree of both trees beyond :data:`DIRECT_WORKERS` (at 16 workers, degree 4 measured
#: 0.96x degree 2; one tree alone, combine 0.95x and relay 0.80x both; measured before
#: unpaced input was chunked, as the figures above are not).
DEFAULT_DEGREE = 2


def default_degrees(workers: int, relay: int | None, combine: int | None) -> tuple[int, int]:
    """``(relay, combine)`` degrees: those given (non-negative integers), and for a None the
    default, direct (0) up to :data:`DIRECT_WORKERS` workers and :data:`DEFAULT_DEGREE` beyond."""
    out = []
    for name, d in (("relay", relay), ("combine", combine)):
        if d is None:
            d = 0 if workers <= DIRECT_WORKERS else DEFAULT_DEGREE
        elif isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"{name} must be a non-negative integer or None, got {d!r}")
        out.append(d)
    return out[0], out[1]


def broadcast_parent(k: int, degree: int) -> int | None:
    """The worker that passes batches on to worker ``k`` (None: the emitter feeds it): a
    ``degree``-ary heap over the worker numbers, rooted at worker 0."""
    return None if k == 0 else (k - 1) // degree


def combine_parent(k: int, workers: int, degree: int) -> int | None:
    """The worker that worker ``k`` reports its pairs to (None: the collector): the same heap
    mirrored, rooted at the last worker, so that, as in the broadcast tree, every edge goes to
    a higher-numbered worker and the graph stays acyclic."""
    j = workers - 1 - k
    return None if j == 0 else workers - 1 - (j - 1) // degree
