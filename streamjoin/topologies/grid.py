"""``grid``: DP-Join's m×n grid of join cores (Buono et al. §III)."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.join_core import JoinCoreConfig
from streamjoin.actors.router import GridRoute
from streamjoin.checks import positive_int
from streamjoin.modes import FORWARDS, Forward
from streamjoin.topologies.base import Topology, add_actor, check_actors, index_options_of

#: A core's input ports and the stream each carries: R along its row, S along its column.
PORTS = {"row": (0,), "col": (1,)}

#: In a chained grid, the output port on which a core passes each input port's batches on to
#: its neighbour (right along the row, down the column), where they arrive on the same port.
PASSED_ON = {"row": "row_next", "col": "col_next"}


def grid(
    m: int,
    n: int,
    index: str | None = None,
    forward: Forward = "chain",
    *,
    index_options: dict | None = None,
    **options,
) -> Topology:
    """DP-Join's m×n grid (Buono et al. §III): core (j, i) holds R-partition j and S-partition i.

    R batches go to a row (round robin) and reach every core of it; S batches go to a column
    and reach every core of it, so each (r, s) pair meets at exactly one core. With
    ``forward="chain"`` the emitter feeds the first core of each row and column and each core
    passes batches on to its neighbour (right for R, down for S; DP-Join §III-C); with
    ``"direct"`` the emitter sends to every core of the row or column itself.
    ``index_options`` (and ``**options``) go to every core's index. ``m * n`` cores and the
    emitter and collector are at most :data:`~streamjoin.topologies.base.MAX_ACTORS` actors.

    A self-join runs as the stream joined with itself (``paired``): every batch goes to a row
    as R and to a column as S, and a core keeps a meeting of an R copy with an S copy iff the R
    copy is strictly the older (:class:`~streamjoin.actors.join_spec.JoinSpec`), so each pair
    is found once, where the older tuple's row crosses the newer one's column.
    """
    positive_int("m", m)
    positive_int("n", n)
    check_actors(f"grid({m}, {n})", m * n + 2)
    if forward not in FORWARDS:
        raise ValueError(f"forward must be 'chain' or 'direct', got {forward!r}")
    opts = index_options_of(index, index_options, options)
    chained = forward == "chain"
    core = JoinCoreConfig(index, opts, PORTS, forward=PASSED_ON if chained else None, paired=True)
    g = nx.MultiDiGraph(self_join=True)
    add_actor(g, "emitter", EmitterConfig(GridRoute(m, n)), pos=(-0.2, 0.9), label="emitter")
    add_actor(g, "collector", CollectorConfig(), pos=(n + 1.2, -(m - 1) / 2), label="collector")
    for j in range(m):
        for i in range(n):
            name = f"core{j}_{i}"
            label = f"core ({j},{i})\n{index or 'auto'}"
            add_actor(g, name, core, pos=(i + 1, -j), label=label)
            g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    for j in range(m):
        for i in range(n):
            name = f"core{j}_{i}"
            if not chained or i == 0:
                g.add_edge("emitter", name, src_port=f"row{j}", dst_port="row", label="R")
            else:
                g.add_edge(
                    f"core{j}_{i - 1}", name, src_port=PASSED_ON["row"], dst_port="row", label="R"
                )
    for j in range(m):
        for i in range(n):
            name = f"core{j}_{i}"
            if not chained or j == 0:
                g.add_edge("emitter", name, src_port=f"col{i}", dst_port="col", label="S")
            else:
                g.add_edge(
                    f"core{j - 1}_{i}", name, src_port=PASSED_ON["col"], dst_port="col", label="S"
                )
    return Topology(f"grid({m}x{n}, {forward})", g)
