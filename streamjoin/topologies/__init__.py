"""Topology builders: each returns a :class:`Topology` (an actor graph) that every executor runs."""

import re

from streamjoin.topologies.base import Topology
from streamjoin.topologies.grid import grid
from streamjoin.topologies.handshake import handshake
from streamjoin.topologies.panjoin import panjoin
from streamjoin.topologies.shared_index import shared_index
from streamjoin.topologies.single import single
from streamjoin.topologies.split import split
from streamjoin.topologies.spo import spo

__all__ = [
    "Topology",
    "grid",
    "handshake",
    "panjoin",
    "parse",
    "shared_index",
    "single",
    "split",
    "spo",
]


def parse(spec: str, index: str | None = None, index_options: dict | None = None) -> Topology:
    """A topology from a short spec: ``single``, ``split:4``, ``grid:2x2``, ``grid:2x2:direct``,
    a bare layout ``2x2`` (a chain-forwarding grid), ``handshake:4`` (the original handshake
    join), ``handshake:4:ll`` (its low-latency variant), ``panjoin:2x4`` (workers x
    subwindows per window), ``shared:4`` (a shared-index core with 4 threads; the index
    defaults to ``pim_tree``) or ``spo:2`` (SPO-Join with 2 PO-Join workers). ``index_options``
    go to every join actor's index."""
    kw = {"index_options": index_options}
    text = spec.strip().lower()
    if re.fullmatch(r"\d+x\d+", text):
        text = f"grid:{text}"
    if text == "single":
        return single(index, **kw)
    if m := re.fullmatch(r"split:(\d+)", text):
        return split(int(m[1]), index, **kw)
    if m := re.fullmatch(r"grid:(\d+)x(\d+)(?::(\w+))?", text):
        return grid(int(m[1]), int(m[2]), index, forward=m[3] or "chain", **kw)
    if m := re.fullmatch(r"handshake:(\d+)(:ll)?", text):
        return handshake(int(m[1]), index, low_latency=bool(m[2]), **kw)
    if m := re.fullmatch(r"panjoin:(\d+)(?:x(\d+))?", text):
        return panjoin(int(m[1]), int(m[2] or 4), index, **kw)
    if m := re.fullmatch(r"shared:(\d+)", text):
        return shared_index(int(m[1]), index or "pim_tree", **kw)
    if m := re.fullmatch(r"spo(?::(\d+))?", text):
        return spo(int(m[1] or 2), **kw)
    raise ValueError(
        f"cannot read topology {spec!r}; use single, split:N, grid:MxN, grid:MxN:direct, "
        "handshake:N, handshake:N:ll, panjoin:WORKERSxSUBWINDOWS, shared:THREADS or spo:WORKERS"
    )
