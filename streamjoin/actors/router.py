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


class Router:
    """Sends every batch to port ``out`` (one join core); subclasses spread batches over
    several. Stateful (it counts what it sent): one per emitter, made by a route spec."""

    def __call__(self, batch: Batch) -> list[tuple[str, Batch]]:
        return [("out", batch)]

    def eof(self) -> list[tuple[str, object]]:
        """Messages that follow the last batch."""
        return []


class _SplitRouter(Router):
    def __init__(self, n: int) -> None:
        self.n = n
        self.sent = 0

    def __call__(self, batch):
        owner = self.sent % self.n
        self.sent += 1
        return [(f"out{c}", batch.with_store(c == owner)) for c in range(self.n)]


class _GridRouter(Router):
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


class _HandshakeRouter(_GridRouter):
    def __init__(self) -> None:
        super().__init__(1, 1)

    def eof(self):
        return [("row0", Drain()), ("col0", Drain())]


@dataclass(frozen=True)
class SingleRoute:
    """Every batch to port ``out`` (one join core)."""

    def router(self) -> Router:
        return Router()


@dataclass(frozen=True)
class SplitRoute:
    """SplitJoin / ScaleJoin: every batch to all ``n`` cores (ports ``out0``…), stored by one,
    taken round robin per batch."""

    n: int

    def router(self) -> Router:
        return _SplitRouter(self.n)


@dataclass(frozen=True)
class GridRoute:
    """DP-Join: the R tuples of a batch to row ``j`` (port ``row{j}``), its S tuples to column
    ``i`` (port ``col{i}``), rows and columns taken round robin."""

    m: int
    n: int

    def router(self) -> Router:
        return _GridRouter(self.m, self.n)


@dataclass(frozen=True)
class HandshakeRoute:
    """Handshake join: R to the left end of the chain (``row0``), S to the right end
    (``col0``); at the end of input a drain marker down each."""

    def router(self) -> Router:
        return _HandshakeRouter()


#: A route spec: what an emitter's config says about where batches go.
RouteSpec = SingleRoute | SplitRoute | GridRoute | HandshakeRoute
