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

(a nonce is 12 bytes, ``<IQ``: the 0 or 1, then ``n``; each is used once under its key). The
receiver checks the head's tag before it reads the box, so a length that was altered is
caught before anything waits on it; then it requires ``n`` to be the number it expects next,
and opens the box. A head or a box that does not open was altered or not written by the
sender; a head that opens with another number is a real frame of this edge out of its place:
replayed (a number already taken) or after a gap (frames dropped or held back). Nothing in a
record is used before its tag is checked.

**Cost.** Each side encrypts or decrypts a frame's bytes once, from the arrays where they lie
to the frame's own buffer, through a buffer of :data:`CHUNK_BYTES` it reuses: AES-GCM at
about 8 GB/s on a core with AES instructions (about 100 µs per 800 KB frame on each side),
and a few µs per frame besides. Plain frames move at memory speed through loopback, so there
sealing halves one edge's rate and costs a run on a 2-core machine about a tenth of its
throughput (``benchmarks/sealed_edges.py``); across machines, the network is the slower part.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
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
#: bytes a sealer encrypts into, and an opener reads into, at a time: what a sealed edge holds
#: besides its frames, however large they are (as fast here as a buffer of a whole 800 KB
#: frame; 256 KB was slower, by the system calls)
CHUNK_BYTES = 1 << 20
#: room a cipher may ask for beyond what it is given (a block, less a byte)
_SLACK = 15
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
        self._cipher = algorithms.AES(key)
        self._chunk = bytearray(CHUNK_BYTES + _SLACK)
        self.next = 0

    def seal(self, frames: list[list], write: Callable[[memoryview], None]) -> None:
        """Seal ``frames`` (each a list of pieces from :func:`~streamjoin.runtime.ray.wire.frame`
        or :func:`~streamjoin.runtime.ray.wire.end_frame`), numbered on from :attr:`next`,
        and hand their records to ``write`` in order, at most :data:`CHUNK_BYTES` at a time:
        each piece is encrypted where it lies into a buffer this sealer reuses, written out
        before it is filled again."""
        chunk = memoryview(self._chunk)
        at = 0
        for frame in frames:
            pieces = [memoryview(p).cast("B") for p in wire.padded(frame)]
            n = self.next
            head = HEAD.pack(n, sum(p.nbytes for p in pieces) + TAG_BYTES)
            if at + HEAD_BYTES > CHUNK_BYTES:
                write(chunk[:at])
                at = 0
            chunk[at : at + HEAD.size] = head
            chunk[at + HEAD.size : at + HEAD_BYTES] = self._aead.encrypt(
                _NONCE.pack(_HEAD_TAG, n), b"", head
            )
            at += HEAD_BYTES
            box = Cipher(self._cipher, modes.GCM(_NONCE.pack(_BOX, n))).encryptor()
            box.authenticate_additional_data(head)
            for piece in pieces:
                for start in range(0, piece.nbytes, CHUNK_BYTES):
                    part = piece[start : start + CHUNK_BYTES]
                    if at + part.nbytes > CHUNK_BYTES:
                        write(chunk[:at])
                        at = 0
                    at += box.update_into(part, chunk[at:])
            rest = box.finalize() + box.tag
            if at + len(rest) > CHUNK_BYTES:
                write(chunk[:at])
                at = 0
            chunk[at : at + len(rest)] = rest
            at += len(rest)
            self.next = n + 1
        if at:
            write(chunk[:at])


class Opener:
    """The receiving end of a sealed edge: its key and the number of the frame it expects."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self._cipher = algorithms.AES(key)
        self._chunk = bytearray(CHUNK_BYTES)
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

    def open_box(self, size: int, read_into: Callable[[memoryview], int]) -> memoryview:
        """The frame in the box of ``size`` bytes (a length :meth:`open_head` checked) of the
        record whose head it took last, read with ``read_into`` (fills a view from the
        connection, returns how much; 0 at its end) and decrypted as it arrives, through a
        buffer this opener reuses, into a buffer of the frame's own (its messages are views of
        it). Nothing of it is used unless the tag at the box's end checks; the number is
        consumed either way.

        Raises
        ------
        TamperedFrame
            The box does not open: altered on the way, or not written by the sender.
        """
        n = self.next
        self.next = n + 1
        length = size - TAG_BYTES
        plain = bytearray(length + _SLACK)
        out, chunk = memoryview(plain), memoryview(self._chunk)
        box = Cipher(self._cipher, modes.GCM(_NONCE.pack(_BOX, n))).decryptor()
        box.authenticate_additional_data(HEAD.pack(n, size))
        got = done = 0
        while got < length:
            k = read_into(chunk[: min(CHUNK_BYTES, length - got)])
            got += k
            done += box.update_into(chunk[:k], out[done:])
        tag = bytearray(TAG_BYTES)
        at = 0
        while at < TAG_BYTES:
            at += read_into(memoryview(tag)[at:])
        try:
            rest = box.finalize_with_tag(bytes(tag))
        except InvalidTag:
            raise TamperedFrame(
                f"frame {n} does not authenticate: altered on the way, or not written by the sender"
            ) from None
        out[done : done + len(rest)] = rest
        return out[:length]
