"""How the emitter spreads closed batches over the join cores of a topology.

Assignment is round robin per batch (not per tuple): sub-batches stay large, and which core
stores a tuple does not change the answer, only the balance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamjoin.batch import Batch


@dataclass(frozen=True)
class Drain:
    """End of input, sent after the last batch where a layout must push its state on."""

    def __len__(self) -> int:
        return 0


class Route:
    """Every batch to port ``out`` (one join core)."""

    def __call__(self, batch: Batch) -> list[tuple[str, Batch]]:
        return [("out", batch)]

    def eof(self) -> list[tuple[str, object]]:
        """Messages that follow the last batch."""
        return []


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


class HandshakeRoute(GridRoute):
    """Handshake join: R to the left end of the chain (``row0``), S to the right end
    (``col0``); at the end of input a drain marker down each."""

    def __init__(self) -> None:
        super().__init__(1, 1)

    def eof(self):
        return [("row0", Drain()), ("col0", Drain())]


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
        case "handshake":
            return HandshakeRoute()
    raise ValueError(f"unknown route kind {spec['kind']!r}")
