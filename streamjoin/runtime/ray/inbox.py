"""A host's inbox (:mod:`~streamjoin.runtime.ray.host`): what its reader hands its worker,
one typed item per kind, and the bounded queue that coalesces waiting messages."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from streamjoin.runtime.coalesce import mergeable
from streamjoin.runtime.ray.channels import Channel


@dataclass(frozen=True, slots=True)
class Message:
    """A message read from the edge of ``sender``, for ``port``."""

    sender: str
    port: str
    message: object


@dataclass(frozen=True, slots=True)
class Messages:
    """What :meth:`Inbox.take` hands on for :class:`Message` items: one, or consecutive ones
    of one sender for one port that :func:`mergeable` allows to merge, in arrival order."""

    sender: str
    port: str
    messages: list


@dataclass(frozen=True, slots=True)
class EdgeEnded:
    """The edge of ``sender`` ended (its end frame)."""

    sender: str


@dataclass(frozen=True, slots=True)
class Call:
    """Run ``fn`` in the worker thread (its result is dropped), then set ``finished`` (a
    driver call)."""

    fn: Callable[[], object]
    finished: threading.Event


@dataclass(frozen=True, slots=True)
class NewEdge:
    """A new edge from ``sender``, restarted: the worker reads ``sock`` from now on."""

    sender: str
    sock: Channel


@dataclass(frozen=True, slots=True)
class ThreadFailed:
    """The reader, or a thread taking a new edge, raised ``error``: the worker raises it."""

    error: Exception


#: What goes into an :class:`Inbox`.
InboxItem = Message | EdgeEnded | Call | NewEdge | ThreadFailed
#: What comes out of it (:meth:`Inbox.take`).
Taken = Messages | EdgeEnded | Call | NewEdge | ThreadFailed


class Inbox:
    """What a host's reader hands its worker, in order of arrival (:data:`InboxItem`).

    Once ``limit`` messages wait, the reader stops reading the edges that lie on no cycle
    (:meth:`pause`) until the worker has taken one, and a wake-up socket tells it so; a call,
    a new edge or an error (put by another thread) wakes a worker waiting for frames too. Nothing here blocks the reader:
    edges on a cycle are read on, but their messages count too, so a congested handshake core
    holds back the source instead of the skew between its streams growing without bound.
    """

    def __init__(self, merges_batches: bool, limit: int, max_tuples: int) -> None:
        self.merges_batches = merges_batches
        self.limit = limit
        self.max_tuples = max_tuples
        self.items: deque[InboxItem] = deque()
        self.cond = threading.Condition()
        self.counted = 0  # messages waiting
        self.paused = False
        self.peak = 0
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_w.setblocking(False)

    def put(self, item: InboxItem) -> None:
        with self.cond:
            self.items.append(item)
            if isinstance(item, Message):
                self.counted += 1
            elif isinstance(item, (Call, NewEdge, ThreadFailed)):  # from another thread
                self._wake()
            self.peak = max(self.peak, len(self.items))
            self.cond.notify_all()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a wake-up is waiting already
            self.wake_w.send(b"x")

    def pause(self) -> bool:
        """Whether the reader should stop reading bounded edges; if so, the worker wakes it
        (through ``wake_r``) once there is room again."""
        with self.cond:
            self.paused = self.counted >= self.limit
            return self.paused

    def take(self) -> Taken:
        """The next item; a :class:`Message` comes as :class:`Messages`, with the messages of
        the same sender for the same port after it that :func:`mergeable` allows."""
        with self.cond:
            while not self.items:
                self.cond.wait()
            item = self.items.popleft()
            if not isinstance(item, Message):
                return item
            sender, port = item.sender, item.port
            group = [item.message]
            while self.items:
                nxt = self.items[0]
                if not (
                    isinstance(nxt, Message)
                    and nxt.sender == sender
                    and nxt.port == port
                    and mergeable(self.merges_batches, group, nxt.message, self.max_tuples)
                ):
                    break
                self.items.popleft()
                group.append(nxt.message)
            self.counted -= len(group)
            if self.paused and self.counted < self.limit:
                self.paused = False
                self._wake()
            return Messages(sender, port, group)
