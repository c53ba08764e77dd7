"""streamjoin: exact parallel sliding-window stream joins.

>>> import streamjoin as sj
>>> q = sj.Query(sj.band("x", 10), window=sj.CountWindow(1000))
"""

__version__ = "0.1.0"

from streamjoin import indexes, oracle, sources, topologies  # noqa: E402
from streamjoin.batch import InputError  # noqa: E402
from streamjoin.query import (  # noqa: E402
    CountWindow,
    Query,
    TimeWindow,
    band,
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
)
from streamjoin.runtime import Result, run  # noqa: E402

__all__ = [
    "CountWindow",
    "InputError",
    "Query",
    "Result",
    "TimeWindow",
    "band",
    "equal",
    "greater",
    "greater_equal",
    "indexes",
    "less",
    "less_equal",
    "oracle",
    "run",
    "sources",
    "topologies",
]
