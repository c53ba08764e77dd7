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
    (``col0``); at the end of input a drain marker down each (``one_stream``: a self-join
    that enters at the left end only, and its marker)."""

    def __init__(self, one_stream: bool = False) -> None:
        super().__init__(1, 1)
        self.one_stream = one_stream

    def eof(self):
        return [("row0", Drain())] + ([] if self.one_stream else [("col0", Drain())])


class PairedRoute(Route):
    """A self-join as the stream joined with itself, for a two-way ``route``: every batch
    goes through it twice, as R (``stream`` 0) and as S (``stream`` 1), both copies with the
    one stream's expiry bound as ``horizon`` of R and S alike (see
    :class:`~streamjoin.actors.window_part.JoinSpec`'s ``paired``)."""

    def __init__(self, route: Route) -> None:
        self.route = route

    def __call__(self, batch):
        horizon = np.full(2, batch.horizon[0], dtype=np.int64)
        as_s = np.ones(len(batch), dtype=np.int8)
        r_copy = dataclasses.replace(batch, horizon=horizon)
        s_copy = dataclasses.replace(batch, stream=as_s, horizon=horizon.copy())
        return self.route(r_copy) + self.route(s_copy)

    def eof(self):
        return self.route.eof()


def make_route(spec: dict | None, self_join: bool = False) -> Route:
    """A route from a topology's emitter config: ``{"kind": "split", "n": 4}``, …

    ``self_join``: the query's. A spec with ``"paired": True`` (a layout that routes R and S
    apart) then sends every batch twice (:class:`PairedRoute`); without it a self-join's
    batches go where R's would.
    """
    spec = spec or {"kind": "single"}
    paired = self_join and spec.get("paired", False)
    match spec["kind"]:
        case "single":
            route = Route()
        case "split":
            route = SplitRoute(spec["n"])
        case "grid":
            route = GridRoute(spec["m"], spec["n"])
        case "handshake":
            route = HandshakeRoute(one_stream=self_join and not paired)
        case kind:
            raise ValueError(f"unknown route kind {kind!r}")
    return PairedRoute(route) if paired else route
