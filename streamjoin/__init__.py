"""streamjoin: exact parallel sliding-window stream joins.

>>> import streamjoin as sj
>>> q = sj.Query(sj.band("x", 10), window=sj.CountWindow(1000))
"""

from contextlib import suppress as _suppress
from pathlib import Path as _Path

from streamjoin import kernel_cache as _kernel_cache

# before any kernel loads from numba's cache: drop the ones whose callees changed (the
# housekeeping never fails the import)
with _suppress(OSError, SyntaxError, ValueError):
    _kernel_cache.refresh(_Path(__file__).parent)

from streamjoin import indexes, oracle, sources, topologies  # noqa: E402
from streamjoin._version import __version__
from streamjoin.query import (
    CountWindow,
    Filter,
    Predicate,
    Query,
    Residual,
    TimeWindow,
    band,
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
    not_equal,
    r,
    s,
    where,
)
from streamjoin.runtime import Result, RunTimeout, run
from streamjoin.validation import InputError

__all__ = [
    "__version__",
    "CountWindow",
    "Filter",
    "InputError",
    "Predicate",
    "Query",
    "Residual",
    "Result",
    "RunTimeout",
    "TimeWindow",
    "band",
    "equal",
    "greater",
    "greater_equal",
    "indexes",
    "less",
    "less_equal",
    "not_equal",
    "oracle",
    "r",
    "run",
    "s",
    "sources",
    "topologies",
    "where",
]


def __getattr__(name: str):
    """``streamjoin.spark_bridge`` on first use (PEP 562), so ``import streamjoin`` loads
    neither the bridge nor PySpark, and ``sj.spark_bridge.from_dataframe(df)`` works after a
    plain ``import streamjoin as sj``."""
    if name == "spark_bridge":
        import importlib

        return importlib.import_module("streamjoin.spark_bridge")
    raise AttributeError(f"module 'streamjoin' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "spark_bridge"])
