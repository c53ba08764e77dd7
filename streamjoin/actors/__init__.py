"""Actor logic as plain classes with one entry point, ``on_batch(port, message)``, driven the
same way by every executor (and by unit tests without any executor).

A logic that passes messages on unchanged along a chain says so in ``passes_on(port,
message)``: the executors send those before the step that ``on_batch`` runs (DP-Join passes
the pointer on first, §III-C), so the next core starts while this one works.
"""

from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore

__all__ = ["Collector", "Emitter", "JoinCore", "passes_on"]


def passes_on(logic, port: str, message) -> list:
    """What ``logic`` sends on unchanged before its step on ``message`` (``[]`` for a logic
    without ``passes_on``)."""
    fn = getattr(logic, "passes_on", None)
    return [] if fn is None else fn(port, message)
