"""Executors, ``run()`` and the :class:`Result` it returns."""

from streamjoin.runtime.result import Result
from streamjoin.runtime.run import BACKENDS, run

__all__ = ["BACKENDS", "Result", "run"]
