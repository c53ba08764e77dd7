"""Topology builders: each returns a :class:`Topology` (an actor graph) that every executor runs."""

import re

from streamjoin.topologies.base import Topology
from streamjoin.topologies.parallel import grid, split
from streamjoin.topologies.single import single

__all__ = ["Topology", "grid", "parse", "single", "split"]


def parse(spec: str, index: str | None = None) -> Topology:
    """A topology from a short spec: ``single``, ``split:4``, ``grid:2x2``, ``grid:2x2:direct``,
    or a bare layout ``2x2`` (a chain-forwarding grid)."""
    text = spec.strip().lower()
    if re.fullmatch(r"\d+x\d+", text):
        text = f"grid:{text}"
    if text == "single":
        return single(index)
    if m := re.fullmatch(r"split:(\d+)", text):
        return split(int(m[1]), index)
    if m := re.fullmatch(r"grid:(\d+)x(\d+)(?::(\w+))?", text):
        return grid(int(m[1]), int(m[2]), index, forward=m[3] or "chain")
    raise ValueError(
        f"cannot read topology {spec!r}; use single, split:N, grid:MxN or grid:MxN:direct"
    )
