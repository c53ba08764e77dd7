"""Parallel layouts: ``split`` (SplitJoin / ScaleJoin) and ``grid`` (DP-Join m×n)."""

from __future__ import annotations

import networkx as nx

from streamjoin import indexes
from streamjoin.topologies.base import Topology


def _check(index: str | None, **counts: int) -> None:
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if index is not None:
        indexes.get(index)


def _core_config(index, index_options, **extra) -> dict:
    return {"index": index, "index_options": index_options, **extra}


def split(n: int, index: str | None = None, **index_options) -> Topology:
    """SplitJoin / ScaleJoin: every batch is probed at all ``n`` cores and stored at one.

    The emitter broadcasts each batch; the cores take turns (round robin per batch) storing
    it, so each window is partitioned ``n`` ways and a pair is found at the core that stores
    its earlier tuple. Self-joins are supported.
    """
    _check(index, n=n)
    g = nx.MultiDiGraph(self_join=True)
    mid = (n - 1) / 2
    g.add_node(
        "emitter",
        role="emitter",
        config={"route": {"kind": "split", "n": n}},
        pos=(0, -mid),
        label="emitter",
    )
    g.add_node("collector", role="collector", config={}, pos=(2, -mid), label="collector")
    for c in range(n):
        name = f"core{c}"
        g.add_node(
            name,
            role="join_core",
            config=_core_config(index, index_options),
            pos=(1, -c),
            label=f"core {c}\n{index or 'auto'}",
        )
        g.add_edge("emitter", name, src_port=f"out{c}", dst_port="in", label="R+S")
        g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"split({n})", g)


def grid(
    m: int, n: int, index: str | None = None, forward: str = "chain", **index_options
) -> Topology:
    """DP-Join's m×n grid (Buono et al. §III): core (j, i) holds R-partition j and S-partition i.

    R batches go to a row (round robin) and reach every core of it; S batches go to a column
    and reach every core of it, so each (r, s) pair meets at exactly one core. With
    ``forward="chain"`` the emitter feeds the first core of each row and column and each core
    passes batches on to its neighbour (right for R, down for S); with ``"direct"`` the emitter
    sends to every core of the row or column itself.

    A self-join runs as the stream joined with itself (``paired``): every batch goes to a row
    as R and to a column as S, and a core keeps a meeting of an R copy with an S copy iff the R
    copy is strictly the older (:class:`~streamjoin.actors.window_part.JoinSpec`), so each pair
    is found once, where the older tuple's row crosses the newer one's column.
    """
    _check(index, m=m, n=n)
    if forward not in ("chain", "direct"):
        raise ValueError(f"forward must be 'chain' or 'direct', got {forward!r}")
    g = nx.MultiDiGraph(self_join=True)
    g.add_node(
        "emitter",
        role="emitter",
        config={"route": {"kind": "grid", "m": m, "n": n, "paired": True}},
        pos=(-0.2, 0.9),
        label="emitter",
    )
    g.add_node(
        "collector", role="collector", config={}, pos=(n + 1.2, -(m - 1) / 2), label="collector"
    )
    ports = {"row": (0,), "col": (1,)}
    for j in range(m):
        for i in range(n):
            name = f"core{j}_{i}"
            cfg = _core_config(
                index, index_options, ports=ports, forward=forward == "chain", paired=True
            )
            g.add_node(
                name,
                role="join_core",
                config=cfg,
                pos=(i + 1, -j),
                label=f"core ({j},{i})\n{index or 'auto'}",
            )
            g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    for j in range(m):
        for i in range(n):
            name = f"core{j}_{i}"
            if forward == "direct" or i == 0:
                g.add_edge("emitter", name, src_port=f"row{j}", dst_port="row", label="R")
            else:
                g.add_edge(f"core{j}_{i - 1}", name, src_port="row_next", dst_port="row", label="R")
    for j in range(m):
        for i in range(n):
            name = f"core{j}_{i}"
            if forward == "direct" or j == 0:
                g.add_edge("emitter", name, src_port=f"col{i}", dst_port="col", label="S")
            else:
                g.add_edge(f"core{j - 1}_{i}", name, src_port="col_next", dst_port="col", label="S")
    return Topology(f"grid({m}x{n}, {forward})", g)
