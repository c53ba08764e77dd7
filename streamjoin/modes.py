"""The string modes of the public API, as ``Literal`` types: a type checker catches a mistyped
mode at the call site, and each module's tuple of allowed values (for the clear error a user
gets at run time) is made from the same type with :func:`typing.get_args`."""

from __future__ import annotations

from typing import Literal, get_args

#: What a run keeps: every pair, or their count and latency histogram (``streamjoin.run``).
Collect = Literal["pairs", "count"]
#: What a late row does under a lateness bound (``Query``).
OnLate = Literal["error", "drop"]
#: Which tuples without a partner a join also returns (``Query``): none, R's, S's or both.
How = Literal["inner", "left", "right", "full"]
#: How a grid's batches reach its cores: passed on along rows and columns, or sent directly.
Forward = Literal["chain", "direct"]
#: How the shared-index core merges T_I into T_S (PIM-Tree §4.2).
Merge = Literal["nonblocking", "blocking"]
#: An index's items: 16 bytes (key and ref), or 8 (a key code and a relative ref).
Layout = Literal["wide", "compact"]
#: Where Ray places the actors: its default (filling a node first), or spread over the nodes.
Placement = Literal["default", "spread"]
#: How the Spark bridge brings a DataFrame's rows into arrival order.
SparkOrder = Literal["auto", "sort", "partitions", "keep"]
#: How the Spark bridge moves partitions to the driver.
Transport = Literal["auto", "arrow", "ipc"]

COLLECTS: tuple[str, ...] = get_args(Collect)
ON_LATE: tuple[str, ...] = get_args(OnLate)
HOWS: tuple[str, ...] = get_args(How)
FORWARDS: tuple[str, ...] = get_args(Forward)
MERGES: tuple[str, ...] = get_args(Merge)
LAYOUTS: tuple[str, ...] = get_args(Layout)
PLACEMENTS: tuple[str, ...] = get_args(Placement)
SPARK_ORDERS: tuple[str, ...] = get_args(SparkOrder)
TRANSPORTS: tuple[str, ...] = get_args(Transport)
