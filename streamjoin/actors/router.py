"""How the emitter spreads closed batches over the join cores of a topology.

Assignment is round robin per batch (not per tuple): sub-batches stay large, and which core
stores a tuple does not change the answer, only the balance.
"""

from __future__ import annotations

import numpy as np

from streamjoin.batch import Batch


class Route:
    """Every batch to port ``out`` (one join core)."""

    def __call__(self, batch: Batch) -> list[tuple[str, Batch]]:
        return [("out", batch)]


class SplitRoute(Route):
    """SplitJoin / ScaleJoin: every batch to all ``n`` cores (ports ``out0``…), stored by one."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sent = 0

    def __call__(self, batch):
        owner = self.sent % self.n
        self.sent += 1
        return [(f"out{c}", batch.with_store(c == owner)) for c in range(self.n)]


class GridRoute(Route):
    """DP-Join: the R tuples of a batch to row ``j`` (port ``row{j}``), its S tuples to column
    ``i`` (port ``col{i}``), rows and columns taken round robin."""

    def __init__(self, m: int, n: int) -> None:
        self.m, self.n = m, n
        self.sent = [0, 0]

    def __call__(self, batch):
        out = []
        for stream, prefix, ways in ((0, "row", self.m), (1, "col", self.n)):
            pos = np.flatnonzero(batch.stream == stream)
            if len(pos):
                part = batch if len(pos) == len(batch) else batch.take(pos)
                out.append((f"{prefix}{self.sent[stream] % ways}", part))
                self.sent[stream] += 1
        return out


def make_route(spec: dict | None) -> Route:
    """A route from a topology's emitter config: ``{"kind": "split", "n": 4}``, …"""
    spec = spec or {"kind": "single"}
    match spec["kind"]:
        case "single":
            return Route()
        case "split":
            return SplitRoute(spec["n"])
        case "grid":
            return GridRoute(spec["m"], spec["n"])
    raise ValueError(f"unknown route kind {spec['kind']!r}")
