"""How the emitter spreads closed batches over the join cores of a topology.

Assignment is round robin per batch (not per tuple): sub-batches stay large, and which core
stores a tuple does not change the answer, only the balance.
"""

from __future__ import annotations

import dataclasses
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
    several. Stateful (it counts what it sent): one per emitter, made by a route spec.
    ``copied`` counts the tuples it copied into parts of their own (the emitter counts them
    with its copies: the simulator charges them)."""

    copied: int = 0

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
                if len(pos) == len(batch):
                    part = batch
                else:
                    part = batch.take(pos)
                    self.copied += len(pos)
                out.append((f"{prefix}{self.sent[stream] % ways}", part))
                self.sent[stream] += 1
        return out


class _HandshakeRouter(_GridRouter):
    def __init__(self, one_stream: bool = False) -> None:
        super().__init__(1, 1)
        self.one_stream = one_stream

    def eof(self):
        return [("row0", Drain())] + ([] if self.one_stream else [("col0", Drain())])


class _PairedRouter(Router):
    """A self-join as the stream joined with itself, through a two-way ``router``: every batch
    goes through it twice, as R (``stream`` 0) and as S (``stream`` 1), both copies with the
    one stream's expiry bound as the horizon of R and S alike (``JoinSpec(paired=True)``)."""

    def __init__(self, router: Router) -> None:
        self.router = router

    @property
    def copied(self) -> int:  # type: ignore[override]
        return self.router.copied

    def __call__(self, batch):
        horizon = np.full(2, batch.horizon[0], dtype=np.int64)
        as_s = np.ones(len(batch), dtype=np.int8)
        r_copy = dataclasses.replace(batch, horizon=horizon)
        s_copy = dataclasses.replace(batch, stream=as_s, horizon=horizon.copy())
        return self.router(r_copy) + self.router(s_copy)

    def eof(self):
        return self.router.eof()


class _BroadcastRouter(Router):
    def __init__(self, ports: tuple[str, ...]) -> None:
        self.ports = ports

    def __call__(self, batch):
        return [(port, batch) for port in self.ports]


@dataclass(frozen=True)
class SingleRoute:
    """Every batch to port ``out`` (one join core)."""

    def router(self, self_join: bool = False) -> Router:
        """A fresh router (a self-join's batches go where any batch goes)."""
        return Router()


@dataclass(frozen=True)
class SplitRoute:
    """SplitJoin / ScaleJoin: every batch to all ``n`` cores (ports ``out0``…), stored by one,
    taken round robin per batch."""

    n: int

    def router(self, self_join: bool = False) -> Router:
        return _SplitRouter(self.n)


@dataclass(frozen=True)
class GridRoute:
    """DP-Join: the R tuples of a batch to row ``j`` (port ``row{j}``), its S tuples to column
    ``i`` (port ``col{i}``), rows and columns taken round robin. A self-join's batches go
    twice, as R to a row and as S to a column (the stream joined with itself, ``paired``)."""

    m: int
    n: int

    def router(self, self_join: bool = False) -> Router:
        grid = _GridRouter(self.m, self.n)
        return _PairedRouter(grid) if self_join else grid


@dataclass(frozen=True)
class HandshakeRoute:
    """Handshake join: R to the left end of the chain (``row0``), S to the right end
    (``col0``); at the end of input a drain marker down each. A self-join's batches go in at
    both ends (``paired``: the original handshake join) or, for the low-latency variant, at
    the left end only, with one marker."""

    paired: bool = True

    def router(self, self_join: bool = False) -> Router:
        if not self_join:
            return _HandshakeRouter()
        return _PairedRouter(_HandshakeRouter()) if self.paired else _HandshakeRouter(True)


@dataclass(frozen=True)
class BroadcastRoute:
    """Every batch, whole and in order, to each of ``ports`` (SPO-Join Alg. 1 l. 1–2: a tuple
    goes to the mutable stage and to every PO-Join worker)."""

    ports: tuple[str, ...]

    def router(self, self_join: bool = False) -> Router:
        return _BroadcastRouter(self.ports)


#: A route spec: what an emitter's config says about where batches go.
RouteSpec = SingleRoute | SplitRoute | GridRoute | HandshakeRoute | BroadcastRoute
