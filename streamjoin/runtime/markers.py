"""Progress markers between actors (:class:`~streamjoin.batch.Marker`), as every executor
passes them on.

A node passes the ``k``-th marker on once it has come on each of the node's incoming edges
(:class:`MarkerGate`): every edge is FIFO, so by then the node has handled every message sent
before it. It first sends the output of any batch its logic still holds (``held_batches``:
a pipelined shared-index core), then what :meth:`~streamjoin.actors.base.ActorLogic.on_marker`
returns (pairs a logic keeps beyond its steps: an SPO worker in a combining tree), then the
marker to each successor (:func:`marker_step`). So when the collector has the marker from
every edge, every pair of the batches the emitter sent before it has arrived (Chandy and
Lamport's markers; Flink's watermarks travel the same way). On a graph with cycles a gate
would wait for ever: there the join actors pass markers themselves (``passes_markers``:
:mod:`streamjoin.actors.marker_lanes`), taking them as messages on the port they came on
(:meth:`~streamjoin.topologies.base.Topology.marks_progress`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from streamjoin.batch import MARKER_PORT, Marker


class MarkerGate:
    """Which marker a node may pass on: the highest that has come on every incoming edge
    (from each of ``senders``, however many ports an edge feeds)."""

    def __init__(self, senders: Iterable[Hashable]) -> None:
        self.seen = dict.fromkeys(senders, _NONE)
        self.passed = 0

    def take(self, sender: Hashable, marker: Marker) -> Marker | None:
        """Note ``marker`` from ``sender``; the marker to pass on now, if one is due (every
        edge carries the same markers: the lowest seen on all of them, as it came)."""
        seen = self.seen
        if marker.number > seen[sender].number:
            seen[sender] = marker
        low = min(seen.values(), key=_number)
        if low.number <= self.passed:
            return None
        self.passed = low.number
        return low


_NONE = Marker(0)


def _number(marker: Marker) -> int:
    return marker.number


def marker_step(logic, marker: Marker) -> list:
    """A node's step for a marker its gate passes: the output of the batches its logic holds,
    the logic's own (``on_marker``), then the marker for every successor."""
    out = list(logic.on_idle()) if logic.held_batches else []
    out.extend(logic.on_marker(marker))
    out.append((MARKER_PORT, marker))
    return out
