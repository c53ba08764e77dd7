"""``handshake``: Teubner & Mueller's handshake join, a chain with R and S flowing opposite, and
its low-latency variant (Roy, Teubner & Gemulla)."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.handshake import HandshakeConfig
from streamjoin.actors.router import HandshakeRoute
from streamjoin.checks import positive_int
from streamjoin.topologies.base import Topology, add_actor, check_actors, index_options_of


def handshake(
    n: int,
    index: str | None = None,
    segment: int | None = None,
    low_latency: bool = False,
    *,
    index_options: dict | None = None,
    **options,
) -> Topology:
    """A chain of ``n`` cores; R enters at the left end and S at the right end.

    The original (Teubner & Mueller) moves stored tuples along the chain: each core forwards
    its oldest tuples to the next once its segment is full, with two-phase forwarding so that
    no pair is missed or found twice (see :mod:`streamjoin.actors.handshake`). With
    ``low_latency=True`` (Roy et al.) every batch is passed through the whole chain at once,
    probing at each core, and stored at one core, round robin (see
    :mod:`streamjoin.actors.handshake_ll`).

    A self-join runs on both: the original joins the stream with itself, sending it in at both
    ends (``paired``); the low-latency variant sends it in at the left end only.

    Parameters
    ----------
    n : int
        Cores in the chain; with the emitter and collector at most
        :data:`~streamjoin.topologies.base.MAX_ACTORS` actors.
    index : str, optional
        Window index of every segment.
    segment : int, optional
        Original variant only: tuples a core keeps of each stream before forwarding (default:
        a count window spread evenly over the chain, ``ceil(w / n)``; 4096 for time windows).
        The last core of each stream keeps tuples until no later tuple can need them.
    low_latency : bool
        Build the low-latency variant.
    index_options : dict, optional
        Passed to every segment's index; ``**options`` are added to them.
    """
    positive_int("n", n)
    check_actors(f"handshake({n})", n + 2)
    if segment is not None:
        positive_int("segment", segment)
    if segment is not None and low_latency:
        raise ValueError(
            "segment applies to the original handshake join; the low-latency "
            "variant stores each tuple at one core and keeps no segments"
        )
    opts = index_options_of(index, index_options, options)
    g = nx.MultiDiGraph(self_join=True, cyclic=True)
    mid = (n - 1) / 2
    add_actor(
        g,
        "emitter",
        EmitterConfig(HandshakeRoute(paired=not low_latency)),
        pos=(mid, 1),
        label="emitter",
    )
    add_actor(g, "collector", CollectorConfig(), pos=(mid, -1), label="collector")
    for k in range(n):
        core = HandshakeConfig(index, opts, k=k, n=n, segment=segment, low_latency=low_latency)
        add_actor(g, f"core{k}", core, pos=(k, 0), label=f"core {k}\n{index or 'auto'}")
        g.add_edge(f"core{k}", "collector", src_port="out", dst_port="in", label="pairs")
    g.add_edge("emitter", "core0", src_port="row0", dst_port="r_in", label="R")
    g.add_edge("emitter", f"core{n - 1}", src_port="col0", dst_port="s_in", label="S")
    for k in range(n - 1):
        a, b = f"core{k}", f"core{k + 1}"
        g.add_edge(a, b, src_port="r_out", dst_port="r_in", label="R")
        g.add_edge(b, a, src_port="s_out", dst_port="s_in", label="S")
        if not low_latency:
            g.add_edge(b, a, src_port="r_ack_out", dst_port="r_ack", label="ack")
            g.add_edge(a, b, src_port="s_ack_out", dst_port="s_ack", label="ack")
    return Topology(f"handshake({n}{', low_latency' if low_latency else ''})", g)
