"""Window indexes, one module each, available by name through the registry.

>>> from streamjoin import indexes
>>> indexes.names()
['bplus_tree', 'css_tree', 'hash', 'nested_loop']
"""

from streamjoin.indexes import bplus_tree, css_tree, hash, nested_loop  # noqa: F401  (registers the indexes)
from streamjoin.indexes.base import WindowIndex, check_supports, default_for, get, names, register

__all__ = ["WindowIndex", "check_supports", "default_for", "get", "names", "register"]
