"""Bit arrays over item positions, with a summary level, for the PO-Join kernels.

A bit array is a ``uint64`` word array (bit ``p & 63`` of word ``p >> 6`` stands for position
``p``) and a *summary* one level up (bit ``w & 63`` of summary word ``w >> 6`` is set iff word
``w`` is non-zero). Marking and unmarking keep the summary exact, so a scan of a position range
reads one summary word per 4096 positions and only the words that hold a set bit: IE-Join's
bit-array probe (Khayyat et al., §3.1) costs about the range / 4096 plus its matches instead of
the range / 64.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM cttz: one instruction

ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def new_bits(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Cleared ``(words, summary)`` for positions ``[0, n)``."""
    words = max(1, -(-n // 64))
    return np.zeros(words, dtype=np.uint64), np.zeros(max(1, -(-words // 64)), dtype=np.uint64)


@njit(cache=True, nogil=True, inline="always")
def mark(bits, summary, p):
    """Set position ``p``."""
    w = p >> 6
    old = bits[w]
    # read once, write, then branch: testing bits[w] before the |= ran 28x slower (numba 0.68)
    bits[w] = old | (ONE << np.uint64(p & 63))
    if old == 0:
        summary[w >> 6] |= ONE << np.uint64(w & 63)


@njit(cache=True, nogil=True, inline="always")
def unmark(bits, summary, p):
    """Clear position ``p``."""
    w = p >> 6
    bits[w] &= ~(ONE << np.uint64(p & 63))
    if bits[w] == 0:
        summary[w >> 6] &= ~(ONE << np.uint64(w & 63))


@njit(cache=True, nogil=True, inline="always")
def low_mask(b):
    """Word of the bits at and above bit ``b`` (0-63)."""
    return ALL << np.uint64(b)


@njit(cache=True, nogil=True, inline="always")
def high_mask(e):
    """Word of the bits at and below bit ``e`` (0-63)."""
    return ALL >> np.uint64(63 - e)


@njit(cache=True, nogil=True)
def set_positions(bits, summary, start, stop):
    """Positions ``[start, stop)`` set, as :func:`marked` will list them (for tests)."""
    for p in range(start, stop):
        mark(bits, summary, p)


@njit(cache=True, nogil=True, inline="always")
def marked_in(bits, summary, start, stop, out):
    """Write the set positions in ``[start, stop)`` to ``out``, ascending, found through the
    summary; returns how many. O((stop - start) / 4096 + words with a set bit + found)."""
    n = 0
    if stop <= start:
        return 0
    w0, w1 = start >> 6, (stop - 1) >> 6
    for sw in range(w0 >> 6, (w1 >> 6) + 1):
        s = summary[sw]
        if sw == w0 >> 6:
            s &= low_mask(w0 & 63)
        if sw == w1 >> 6:
            s &= high_mask(w1 & 63)
        while s:
            w = sw * 64 + np.int64(trailing_zeros(s))
            s &= s - ONE
            word = bits[w]
            if w == w0:
                word &= low_mask(start & 63)
            if w == w1:
                word &= high_mask((stop - 1) & 63)
            while word:
                out[n] = w * 64 + np.int64(trailing_zeros(word))
                n += 1
                word &= word - ONE
    return n


@njit(cache=True, nogil=True)
def marked(bits, summary, start, stop):
    """The set positions in ``[start, stop)``, ascending (:func:`marked_in` into a new
    array)."""
    out = np.empty(max(0, stop - start), dtype=np.int64)
    return out[: marked_in(bits, summary, start, stop, out)]
