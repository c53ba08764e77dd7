"""Sealed frames: after the handshake every frame of an edge is encrypted, authenticated and
numbered (AES-256-GCM), so that no one on the path between two actors can read a frame, alter
one, write one in, or replay, reorder or drop one unnoticed.

**Keys.** Both ends of an edge derive its key from what the handshake
(:mod:`~streamjoin.runtime.ray.channels`) established::

    K = HKDF-SHA256(key material = the run's secret, salt = Ns ‖ Nr,
                    info = b"streamjoin sealed frames, sender to receiver" ‖ sender name)

The two nonces are fresh on both sides, so every connection has a key of its own: a frame of
another edge, of another run, or of an earlier connection of the same edge (a restarted core)
does not open. Frames go one way only, from the sender that connected to the receiver that
accepted (the receiver writes nothing after the handshake), so an edge has one key, the
sender-to-receiver one; a frame written back towards the sender would not open there.

**Records.** Each frame (with :func:`~streamjoin.runtime.ray.wire.padded` alignment) travels
as one record::

    head  <QQ    n: the frame's number on its edge (0, 1, 2, …), length of the box
    tag          16 bytes: AES-GCM(K, nonce = 1 ‖ n, plaintext = nothing, data = head)
    box          AES-GCM(K, nonce = 0 ‖ n, plaintext = the frame, data = head): the
                 ciphertext and its 16-byte tag

(a nonce is 12 bytes, ``<IQ``: the 0 or 1, then ``n``; each is used once under its key). The receiver checks the head's tag before it reads the box, so a
length that was altered is caught before anything waits on it; then it requires ``n`` to be the
number it expects next, and opens the box. A head or a box that does not open was altered or
not written by the sender; a head that opens with another number is a real frame of this edge
out of its place: replayed (a number already taken) or after a gap (frames dropped or held
back). Nothing in a record is used before its tag is checked.

AES-GCM runs at several GB/s on a core with AES instructions, a few times the rate at which
the actors' kernels produce or consume bytes, and costs about a microsecond per frame beside
that (``benchmarks/bench_sealed_edges.py`` measures a run with sealing on against off).
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from streamjoin.runtime.ray import wire

#: a record's head: the frame's number on its edge, the length of its box
HEAD = struct.Struct("<QQ")
TAG_BYTES = 16
#: a record's head and its tag, read before its box
HEAD_BYTES = HEAD.size + TAG_BYTES
#: the most a box can hold: the largest frame, padded, and its tag
MAX_BOX_BYTES = (
    wire.HEAD.size + wire.MAX_PORT_BYTES + wire.MAX_META_BYTES + 7 + wire.MAX_BODY_BYTES + TAG_BYTES
)
_NONCE = struct.Struct("<IQ")
_BOX, _HEAD_TAG = 0, 1
_INFO = b"streamjoin sealed frames, sender to receiver\x00"


class TamperedFrame(wire.ProtocolError):
    """A record that does not open under its edge's key, or that opens out of its place."""


def edge_key(secret: bytes, ns: bytes, nr: bytes, sender: bytes) -> bytes:
    """The key of the edge whose handshake exchanged nonces ``ns`` (the sender's) and ``nr``
    (the receiver's) for ``sender`` (module docstring)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=ns + nr, info=_INFO + sender)
    return hkdf.derive(secret)


class Sealer:
    """The sending end of a sealed edge: its key and the number of its next frame."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.next = 0

    def seal(self, pieces: list) -> list:
        """The record of the frame ``pieces`` (from :func:`~streamjoin.runtime.ray.wire.frame`
        or :func:`~streamjoin.runtime.ray.wire.end_frame`), numbered next: head, tag, box."""
        plain = b"".join(memoryview(p).cast("B") for p in wire.padded(pieces))
        n = self.next
        head = HEAD.pack(n, len(plain) + TAG_BYTES)
        tag = self._aead.encrypt(_NONCE.pack(_HEAD_TAG, n), b"", head)
        box = self._aead.encrypt(_NONCE.pack(_BOX, n), plain, head)
        self.next = n + 1
        return [head + tag, box]


class Opener:
    """The receiving end of a sealed edge: its key and the number of the frame it expects."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.next = 0

    def open_head(self, head_tag: bytes) -> int:
        """The box length a record's head and tag state, once they opened as the frame
        expected next.

        Raises
        ------
        TamperedFrame
            The head does not open (altered, or not the sender's), or opens with the number
            of a frame taken already (replayed) or of a later one (frames dropped or reordered
            on the way).
        """
        head, tag = head_tag[: HEAD.size], head_tag[HEAD.size :]
        n, size = HEAD.unpack(head)
        try:
            self._aead.decrypt(_NONCE.pack(_HEAD_TAG, n), tag, head)
        except InvalidTag:
            raise TamperedFrame(
                f"frame {self.next}'s head does not authenticate: altered on the way, or "
                "not written by the sender"
            ) from None
        if n < self.next:
            raise TamperedFrame(
                f"frame {n} came again where frame {self.next} belongs: replayed on the way"
            )
        if n > self.next:
            missing = f"frame {self.next}" if n == self.next + 1 else f"frames {self.next}–{n - 1}"
            raise TamperedFrame(
                f"frame {n} came where frame {self.next} belongs: {missing} dropped or "
                "reordered on the way"
            )
        if not TAG_BYTES <= size <= MAX_BOX_BYTES:  # the sender's own bug: never written
            raise TamperedFrame(f"frame {n} states a box of {size} bytes")
        return size

    def open_box(self, box: bytearray) -> bytes:
        """The frame in the box of the record whose head :meth:`open_head` took last (its
        number is consumed either way)."""
        n = self.next
        self.next = n + 1
        try:
            return self._aead.decrypt(_NONCE.pack(_BOX, n), box, HEAD.pack(n, len(box)))
        except InvalidTag:
            raise TamperedFrame(
                f"frame {n} does not authenticate: altered on the way, or not written by the sender"
            ) from None
