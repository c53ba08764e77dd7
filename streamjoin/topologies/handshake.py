"""``handshake``: Teubner & Mueller's handshake join, a chain with R and S flowing opposite, and
its low-latency variant (Roy, Teubner & Gemulla)."""

from __future__ import annotations

import math

import networkx as nx

from streamjoin import indexes
from streamjoin.topologies.base import Topology


def handshake(
    n: int,
    index: str | None = None,
    segment: int | None = None,
    low_latency: bool = False,
    **index_options,
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
        Cores in the chain.
    index : str, optional
        Window index of every segment.
    segment : int, optional
        Original variant only: tuples a core keeps of each stream before forwarding (default:
        a count window spread evenly over the chain, ``ceil(w / n)``; 4096 for time windows).
        The last core of each stream keeps tuples until no later tuple can need them.
    low_latency : bool
        Build the low-latency variant.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if segment is not None and (not isinstance(segment, int) or segment < 1):
        raise ValueError(f"segment must be a positive integer, got {segment!r}")
    if segment is not None and low_latency:
        raise ValueError(
            "segment applies to the original handshake join; the low-latency "
            "variant stores each tuple at one core and keeps no segments"
        )
    if index is not None:
        indexes.get(index)
    g = nx.MultiDiGraph(self_join=True, cyclic=True)
    route = {"kind": "handshake"} if low_latency else {"kind": "handshake", "paired": True}
    g.add_node(
        "emitter",
        role="emitter",
        config={"route": route},
        pos=((n - 1) / 2, 1),
        label="emitter",
    )
    g.add_node("collector", role="collector", config={}, pos=((n - 1) / 2, -1), label="collector")
    role = "handshake_ll_core" if low_latency else "handshake_core"
    config = {"n": n, "index": index, "index_options": index_options}
    if not low_latency:
        config["segment"] = segment
    for k in range(n):
        g.add_node(
            f"core{k}",
            role=role,
            pos=(k, 0),
            label=f"core {k}\n{index or 'auto'}",
            config={"k": k, **config},
        )
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


def segment_capacity(query, n: int, segment: int | None) -> tuple[int, int]:
    """Tuples each core keeps of R and of S before forwarding."""
    if segment is not None:
        return segment, segment
    if query.window.kind == "count":
        return tuple(math.ceil(query.window_size(y) / n) for y in (0, 1))
    return 4096, 4096
