"""``njit`` for kernels that allocate nothing, compiled without numba's reference counting.

numba increments and decrements an array's reference count (two atomic instructions) where an
array is passed to a call, bound to an inlined helper's parameter or replaced in a loop, and
prunes none of them once a loop is involved; in the shared index's task kernel they took a
large share of its cycles. A kernel that allocates no array needs none of them: compiled with
``_nrt=False`` its callers' loops pay nothing for calling it, and LLVM still inlines it
(docs/performance.md, "Reference counting in the task kernel"). A kernel compiled this way
must not allocate, return or keep an array (numba refuses to compile one that does).
"""

from __future__ import annotations

from typing import Any

from numba import njit


def njit_no_refcount(fn):
    """``njit(cache=True, nogil=True)`` without reference counting (module docstring)."""
    return njit(cache=True, nogil=True, _nrt=False)(fn)


#: ``jit_options`` of an ``@overload`` whose implementations allocate nothing
NO_REFCOUNT: Any = {"_nrt": False}
