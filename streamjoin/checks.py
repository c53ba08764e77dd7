"""Argument checks shared by every layer (queries, topologies, indexes, executors, the Spark
bridge, the command line).

A low module, importing nothing of streamjoin, so that ``topologies``, ``indexes`` and
``actors`` can use it without importing ``runtime`` (imports only go down, docs/design.md §3).
Each check raises the ``ValueError`` a user can act on, naming the argument and the value
given. :func:`number` is the one check of a number option: its type (an integer where one is
meant, never a bool), NaN, infinity and its range; the command line parses its number options
with it too (:func:`cli_number`), so ``--max-delay inf`` and ``max_delay=float("inf")`` get
the same answer.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

#: The most threads one actor starts (a shared-index core's, BI-Sort's probe pool): four times
#: the hardware threads of the largest two-socket servers sold (2 x 128 cores x 2 SMT); each
#: thread holds its own scratch arrays, and a million threads is a typo that would exhaust
#: memory before the first batch.
MAX_THREADS = 1024


def _interval(low, high, low_open: bool, high_open: bool) -> str:
    """`` >= 0``, `` > 0``, `` <= 10``, `` in [3, 65536]``, `` in (0, 1]``, or nothing."""
    lo, hi = (v if v is None or isinstance(v, int) else f"{v:g}" for v in (low, high))
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {lo}"
    if high is not None:
        return f" {'<' if high_open else '<='} {hi}"
    return ""


def number(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    what: str | None = None,
) -> int | float:
    """``value`` checked as a number option: an ``int`` if ``integer`` (a Python or numpy
    integer), else a ``float`` (any finite real); never a bool, NaN or ±infinity; within
    ``[low, high]`` (an end excluded with ``low_open`` / ``high_open``; None: unbounded).

    ``what`` names the kind of number in the message (default ``"an integer"`` or ``"a
    finite number"``), e.g. ``"a number of seconds"``.

    Raises
    ------
    ValueError
        ``"{name} must be {what}{range}, got {value!r}"``, e.g. ``"max_delay must be a
        number of seconds >= 0, got inf"``.
    """
    kind = what or ("an integer" if integer else "a finite number")
    message = f"{name} must be {kind}{_interval(low, high, low_open, high_open)}, got {value!r}"
    if isinstance(value, bool | np.bool_):
        raise ValueError(message)
    if integer:
        if not isinstance(value, int | np.integer):
            raise ValueError(message)
        value = int(value)
    elif isinstance(value, Real) and math.isfinite(value):
        value = float(value)
    else:
        raise ValueError(message)
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(message)
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError(message)
    return value


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


def cli_number(**bounds):
    """An argparse ``type=`` that parses an option's text as a number and checks it with
    :func:`number` (``bounds`` are its keywords), so the command line answers a bad number
    as the API does: ``--max-delay inf`` is ``argument --max-delay: must be a number of
    seconds >= 0, got inf``."""
    import argparse

    integer = bounds.get("integer", False)

    def parse(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            kind = bounds.get("what") or ("an integer" if integer else "a number")
            raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}") from None
        try:
            return number("", value, **bounds)
        except ValueError as e:  # argparse names the option: "argument --x: must be ..."
            rule = str(e).strip().rpartition(", got ")[0]
            raise argparse.ArgumentTypeError(f"{rule}, got {text}") from None

    parse.__name__ = "number"  # argparse names the type in "invalid number value"
    return parse
