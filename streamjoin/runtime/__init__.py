"""Executors, ``run()`` and the :class:`Result` it returns.

The executors are :class:`Local`, :class:`Ray` and :class:`Sim`, by name in :data:`BACKENDS`.
``Ray`` and ``Sim`` are imported on first access (PEP 562), so that ``import streamjoin``
imports neither Ray nor SimPy.
"""

from streamjoin.runtime.executor import BACKENDS, Defaults, Executor, RunTimeout
from streamjoin.runtime.local import Local
from streamjoin.runtime.result import Result
from streamjoin.runtime.run import run

__all__ = ["BACKENDS", "Defaults", "Executor", "Local", "Result", "RunTimeout", "run"]

_LAZY = {"Ray": "ray", "Sim": "sim"}  # attribute -> backend name


def __getattr__(name: str):
    if name in _LAZY:
        return BACKENDS[_LAZY[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
