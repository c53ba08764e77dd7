"""Atomic operations on int64 array elements for ``nogil`` numba kernels, and a spin lock.

numba has no atomics for CPU code, so these are intrinsics over LLVM's atomic instructions
(``atomicrmw``, ``cmpxchg``, atomic ``load``/``store``); each is one instruction on x86-64
(``lock xadd``, ``lock cmpxchg``, plain ``mov`` for acquire loads and release stores).
Compiled code that uses them caches to disk like any other kernel.

Memory order: :func:`atomic_add` and :func:`atomic_cas` are sequentially consistent,
:func:`load_acquire` acquires, :func:`store_release` releases. A thread that publishes data
with plain stores and then :func:`store_release` of a flag, read by another thread with
:func:`load_acquire`, has its data seen by that thread (the flag's *happens-before* edge).

:func:`spin_lock` spins on a test-and-test-and-set with ``pause`` and hands the processor back
(``sched_yield``) after a few spins: the machine may run more threads than it has cores, and
a lock holder that lost its processor must get it back quickly.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")

#: Spins with ``pause`` before a waiting thread yields its processor.
SPINS = 64
#: Yields before a waiting thread sleeps (:data:`NAP_US` at a time): a thread that waits that
#: long (a yield with nothing else to run is well under a microsecond, so this is a fraction
#: of a millisecond) waits for one that lost its processor to another job, and a processor
#: that keeps yielding never goes idle, so the scheduler never moves the other thread onto it.
#: Far fewer yields would put naps between close steps too (docs/performance.md has the
#: measurements).
YIELDS = 2048
#: Microseconds a long wait sleeps at a time.
NAP_US = 20

#: int64 slots between two locks (or flags) that threads write often: one 64-byte cache line
#: each, so that threads taking different locks do not contend for one line.
PAD = 8


def _element_pointer(context, builder, aryty, ary, idx):
    arr = context.make_array(aryty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, aryty, arr, [idx])


@intrinsic
def atomic_add(typingctx, arr, i, v):
    """``arr[i] += v`` atomically; returns the value before. ``arr`` int64, C-contiguous."""

    def codegen(context, builder, sig, args):
        aryty, idxty, valty = sig.args
        ptr = _element_pointer(context, builder, aryty, args[0], args[1])
        val = context.cast(builder, args[2], valty, aryty.dtype)
        return builder.atomic_rmw("add", ptr, val, "seq_cst")

    return arr.dtype(arr, i, v), codegen


@intrinsic
def atomic_cas(typingctx, arr, i, expected, new):
    """If ``arr[i] == expected`` set it to ``new``, atomically; returns the value before (the
    exchange happened iff it equals ``expected``)."""

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ptr = _element_pointer(context, builder, aryty, args[0], args[1])
        exp = context.cast(builder, args[2], sig.args[2], aryty.dtype)
        new = context.cast(builder, args[3], sig.args[3], aryty.dtype)
        res = builder.cmpxchg(ptr, exp, new, "seq_cst", "seq_cst")
        return builder.extract_value(res, 0)

    return arr.dtype(arr, i, expected, new), codegen


@intrinsic
def load_acquire(typingctx, arr, i):
    """``arr[i]``, read with acquire order."""

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ptr = _element_pointer(context, builder, aryty, args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return arr.dtype(arr, i), codegen


@intrinsic
def store_release(typingctx, arr, i, v):
    """``arr[i] = v``, written with release order."""

    def codegen(context, builder, sig, args):
        aryty, _, valty = sig.args
        ptr = _element_pointer(context, builder, aryty, args[0], args[1])
        builder.store_atomic(context.cast(builder, args[2], valty, aryty.dtype), ptr, "release", 8)
        return context.get_dummy_value()

    return types.void(arr, i, v), codegen


@intrinsic
def cpu_relax(typingctx):
    """The ``pause`` hint of a spin-wait loop (x86; nothing elsewhere)."""

    def codegen(context, builder, sig, args):
        if _X86:
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(
                cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause"), []
            )
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def nap(typingctx, us):
    """``usleep(us)``: sleep at least ``us`` microseconds (the processor may go idle)."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "usleep")
        builder.call(fn, [builder.trunc(args[0], ir.IntType(32))])
        return context.get_dummy_value()

    return types.void(types.int64), codegen


@intrinsic
def yield_cpu(typingctx):
    """``sched_yield()``: give the processor to another runnable thread."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def cycle_count(typingctx):
    """The processor's cycle counter (``llvm.readcyclecounter``: ``rdtsc`` on x86-64, which
    ticks at a constant rate; 0 on a processor without one)."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


@njit(cache=True, nogil=True, inline="always")
def back_off(spins):
    """One round of a wait that has gone ``spins`` rounds: ``pause`` for the first
    :data:`SPINS`, then hand the processor over (``sched_yield``) for :data:`YIELDS` rounds,
    then sleep :data:`NAP_US` a round (spin briefly, then block: a thread that waits for one
    that lost its processor lets its own go idle). Returns the next round's count."""
    if spins < SPINS:
        cpu_relax()
    elif spins < SPINS + YIELDS:
        yield_cpu()
    else:
        nap(NAP_US)
        return spins
    return spins + 1


@njit(cache=True, nogil=True, inline="always")
def try_lock(locks, i):
    """Take lock ``i`` if it is free (test-and-set); returns whether it was taken."""
    return locks[i] == 0 and atomic_cas(locks, i, 0, 1) == 0


@njit(cache=True, nogil=True, inline="always")
def spin_lock(locks, i):
    """Take lock ``i`` (an int64 slot, 0 when free), waiting as long as it takes.

    Returns how many times the thread found it held (0: uncontended): the contention
    counter of the caller. Test-and-test-and-set: waiters read the line (shared in their
    caches) and try the exchange only once it looks free.
    """
    waits = 0
    while not try_lock(locks, i):
        waits += 1
        spins = 0
        while load_acquire(locks, i) != 0:
            spins = back_off(spins)
    return waits


@njit(cache=True, nogil=True, inline="always")
def unlock(locks, i):
    """Release lock ``i``."""
    store_release(locks, i, 0)
