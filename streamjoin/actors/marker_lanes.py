"""Progress markers at a node that passes them on itself (``passes_markers``): one lane per
stream, as on a handshake chain, where the executors' gate would wait for ever (each core
would wait for its neighbours' markers, and they for its).

A marker comes on each stream's input. The node's logic says when a lane may pass it (the
tuples of that stream before it are done with here); the node reports a marker to the
collector once every lane has passed it. A node passes every marker of a lane in order, and
reports only a marker numbered above the last it reported (the collector's gate takes the
highest from each edge: :class:`~streamjoin.runtime.markers.MarkerGate`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from streamjoin.batch import Marker

_NONE = Marker(0)


class MarkerLanes:
    """The markers of ``lanes`` (stream numbers) waiting at a node, and what it has passed."""

    def __init__(self, lanes: Iterable[int]) -> None:
        self.waiting: dict[int, deque[tuple[Marker, int]]] = {x: deque() for x in lanes}
        self.passed = dict.fromkeys(self.waiting, _NONE)
        self.reported = 0

    def came(self, x: int, marker: Marker, upto: int = 0) -> None:
        """``marker`` came on stream ``x``'s input after its tuples with ``idx < upto``; a
        marker on a stream the node does not serve is dropped (a self-join's second end)."""
        if x in self.waiting:
            self.waiting[x].append((marker, upto))

    def release(self, x: int, done: int | None) -> list[Marker]:
        """The markers of lane ``x`` that pass now, in order: those whose tuples before them
        all have ``idx < done`` (None: every waiting marker)."""
        queue, out = self.waiting.get(x), []
        while queue and (done is None or queue[0][1] <= done):
            out.append(queue.popleft()[0])
        if out:
            self.passed[x] = out[-1]
        return out

    def report(self) -> Marker | None:
        """The marker to send the collector now: the lowest every lane has passed, if it is
        above the last reported."""
        low = min(self.passed.values(), key=lambda m: m.number)
        if low.number <= self.reported:
            return None
        self.reported = low.number
        return low
