"""Window indexes, one module each, available by name through the registry: grouped by the
paper they come from (``pim``, ``panjoin``, ``spo``), the building blocks apart (``blocks``),
the generic ones (``hash``, ``nested_loop``) and the interface (``base``) here.

>>> from streamjoin import indexes
>>> indexes.names()
['bisort', 'bplus_tree', 'chained', 'css_tree', 'hash', 'im_tree', 'nested_loop', 'pim_tree', 'po_join', 'rap_table', 'wib_tree']
"""

from streamjoin.indexes import hash, nested_loop  # noqa: F401  (registers the indexes)
from streamjoin.indexes.base import (
    IndexFallbackWarning,
    IndexPlan,
    WindowIndex,
    check_options,
    check_supports,
    default_for,
    get,
    names,
    plan,
    register,
)
from streamjoin.indexes.panjoin import bisort, rap_table, wib_tree  # noqa: F401
from streamjoin.indexes.pim import bplus_tree, chained, css_tree, pim_tree  # noqa: F401
from streamjoin.indexes.spo import po_join  # noqa: F401

__all__ = [
    "IndexFallbackWarning",
    "IndexPlan",
    "WindowIndex",
    "check_options",
    "check_supports",
    "default_for",
    "get",
    "names",
    "plan",
    "register",
]
