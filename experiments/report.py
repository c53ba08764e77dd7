"""What every experiment records beside its figures: the commit it ran from."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def commit() -> str:
    """The checked-out commit (short hash), ``"unknown"`` outside a git checkout."""
    out = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"
