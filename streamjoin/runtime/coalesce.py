"""Which messages waiting for one actor may reach it as one (the ``ray`` executor's
coalescing, docs/design.md §2: a join core's answer does not depend on batch boundaries)."""

from __future__ import annotations

from streamjoin.batch import Batch, PairBatch, concat_pairs

#: messages waiting in an actor's inbox before it reads no further (the ``ray`` executor; in a
#: cyclic graph: the edges on no cycle), so at most this many ever merge into one
INBOX = 2
#: waiting batches are concatenated up to this many tuples (or the run's batch size, if larger)
MERGE_TUPLES = 4096
#: kernel buffer of each end of an edge (the ``ray`` executor's sockets, sending and receiving):
#: beyond the inbox, what a sender may write ahead before it blocks
EDGE_BUFFER_BYTES = 256 * 1024


def mergeable(merges_batches: bool, group: list, msg, max_tuples: int) -> bool:
    """Whether ``msg`` may join ``group`` (messages for one port of one node, in order) as one
    message. Result pairs always may (the collector only counts and stamps them); batches
    only where the node's logic says its answer does not depend on batch boundaries
    (``merges_batches``: a join core or PanJoin manager, docs/design.md §2, seq order and the later
    horizon kept; handshake cores count batches, workers take commands), up to
    ``max_tuples``."""
    last = group[-1]
    if isinstance(last, PairBatch) and isinstance(msg, PairBatch):
        return True  # result pairs: the collector only counts and stamps them
    return (
        merges_batches
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
