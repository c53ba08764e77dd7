"""Argument checks shared by every layer (queries, topologies, executors, the Spark bridge).

A low module, importing nothing of streamjoin, so that ``topologies`` and ``actors`` can use
it without importing ``runtime`` (imports only go down, docs/design.md §3). Each check raises the
``ValueError`` a user can act on, naming the argument and the value given.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is an integer > 0 (Python or numpy; not a bool).

    Raises
    ------
    ValueError
        ``"{name} must be a positive integer, got {value!r}"``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def positive_number(name: str, value, what: str = "finite number") -> float:
    """``value`` as a float if it is a finite real number > 0 (not a bool).

    ``what`` names the kind of number in the message, e.g. ``"rate in tuples/s"``.

    Raises
    ------
    ValueError
        ``"{name} must be a positive {what}, got {value!r}"``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or value <= 0  # Real promises only < and <=
        or not math.isfinite(value)
    ):
        raise ValueError(f"{name} must be a positive {what}, got {value!r}")
    return float(value)
