"""Which messages waiting for one actor may reach it as one (the ``ray`` executor's
coalescing, DESIGN §2: a join core's answer does not depend on batch boundaries)."""

from __future__ import annotations

from streamjoin.actors.window_part import concat_pairs
from streamjoin.batch import Batch, PairBatch

#: messages waiting in an actor's inbox before it reads no further (the ``ray`` executor; in a
#: cyclic graph: the edges on no cycle), so at most this many ever merge into one
INBOX = 2
#: waiting batches are concatenated up to this many tuples (or the run's batch size, if larger)
MERGE_TUPLES = 4096
#: roles whose ``on_batch`` gives the same answer for two consecutive batches of one port
#: as for their concatenation (DESIGN §2: any batch boundaries, seq order and the later
#: horizon kept); handshake cores count batches, PanJoin workers take commands
_CONCAT_ROLES = ("join_core", "manager")


def mergeable(role: str, group: list, msg, max_tuples: int) -> bool:
    """Whether ``msg`` may join ``group`` (messages for one port of a ``role`` node, in order)
    as one message; batches grow to ``max_tuples`` at most."""
    last = group[-1]
    if isinstance(last, PairBatch) and isinstance(msg, PairBatch):
        return True  # result pairs: the collector only counts and stamps them
    return (
        role in _CONCAT_ROLES
        and isinstance(last, Batch)
        and isinstance(msg, Batch)
        and last.store == msg.store
        and sum(len(b) for b in group) + len(msg) <= max_tuples
    )


def merge(group: list):
    """The messages of a :func:`mergeable` group as one."""
    if len(group) == 1:
        return group[0]
    if isinstance(group[0], PairBatch):
        return concat_pairs(group)
    return Batch.concat(group).with_store(group[0].store)
