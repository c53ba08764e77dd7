"""``split``: SplitJoin / ScaleJoin, every batch probed at all cores and stored at one."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.join_core import JoinCoreConfig
from streamjoin.actors.router import SplitRoute
from streamjoin.checks import positive_int
from streamjoin.topologies.base import Topology, add_actor, check_actors, index_options_of


def split(
    n: int, index: str | None = None, *, index_options: dict | None = None, **options
) -> Topology:
    """SplitJoin / ScaleJoin: every batch is probed at all ``n`` cores and stored at one.

    The emitter broadcasts each batch; the cores take turns (round robin per batch) storing
    it, so each window is partitioned ``n`` ways and a pair is found at the core that stores
    its earlier tuple. Self-joins are supported. ``index_options`` (and ``**options``) go to
    every core's index. ``n`` cores and the emitter and collector are at most
    :data:`~streamjoin.topologies.base.MAX_ACTORS` actors.
    """
    positive_int("n", n)
    check_actors(f"split({n})", n + 2)
    core = JoinCoreConfig(index, index_options_of(index, index_options, options))
    g = nx.MultiDiGraph(self_join=True)
    mid = (n - 1) / 2
    add_actor(g, "emitter", EmitterConfig(SplitRoute(n)), pos=(0, -mid), label="emitter")
    add_actor(g, "collector", CollectorConfig(), pos=(2, -mid), label="collector")
    for c in range(n):
        name = f"core{c}"
        add_actor(g, name, core, pos=(1, -c), label=f"core {c}\n{index or 'auto'}")
        g.add_edge("emitter", name, src_port=f"out{c}", dst_port="in", label="R+S")
        g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"split({n})", g)
