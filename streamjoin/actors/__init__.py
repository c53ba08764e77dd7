"""Actor logic as plain classes with one entry point, ``on_batch(port, message)``, driven the
same way by every executor (and by unit tests without any executor)."""

from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore

__all__ = ["Collector", "Emitter", "JoinCore"]
