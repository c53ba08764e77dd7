"""Sealed records as bytes, for the tests that write them into an edge themselves."""


def sealed(sealer, frames) -> bytes:
    """The records ``sealer`` (a ``sealing.Sealer``) writes for ``frames``, as bytes."""
    out: list[bytes] = []
    sealer.seal(frames, lambda view: out.append(bytes(view)))
    return b"".join(out)
