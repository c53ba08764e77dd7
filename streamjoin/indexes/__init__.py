"""Window indexes, one module each, available by name through the registry.

>>> from streamjoin import indexes
>>> indexes.names()
['bisort', 'bplus_tree', 'chained', 'css_tree', 'hash', 'im_tree', 'nested_loop', 'pim_tree', 'po_join', 'rap_table', 'wib_tree']
"""

from streamjoin.indexes import (  # noqa: F401  (registers the indexes)
    bisort,
    bplus_tree,
    chained,
    css_tree,
    hash,
    nested_loop,
    pim_tree,
    po_join,
    rap_table,
    wib_tree,
)
from streamjoin.indexes.base import (
    IndexFallbackWarning,
    IndexPlan,
    WindowIndex,
    check_supports,
    default_for,
    get,
    names,
    plan,
    register,
)

__all__ = [
    "IndexFallbackWarning",
    "IndexPlan",
    "WindowIndex",
    "check_supports",
    "default_for",
    "get",
    "names",
    "plan",
    "register",
]
