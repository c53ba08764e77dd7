"""The command's output paths, checked before any work: a run of minutes should not end
unable to write what it made, nor replace a file the user did not mean to lose.

- ``-o FOLDER`` (`run`, `compare`): created if absent; the files a run writes there replace
  those of an earlier run (the folder is the command's own). A path that exists and is not a
  folder is an error.
- ``-o FILE`` (`draw`, `calibrate`): in a folder that exists; an existing file is an error
  unless ``--force`` is given.
"""

from __future__ import annotations

import os

FORCE_HELP = "replace the file -o names if it exists (default: an existing file is an error)"


def check_out_folder(out: str) -> None:
    """``-o`` of `run` and `compare`: a folder, or a path where one can be made, in a folder
    this process can write (checked before the run, so that a long run does not end unable
    to write its results). Nothing is created here."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"-o {out}: exists and is not a folder; -o names the output folder")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"-o {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"-o {out}: cannot write in {parent} (permission denied)")


def check_out_file(out: str, force: bool) -> None:
    """``-o FILE`` (`draw`, `calibrate`): in a folder that exists and this process can write;
    an existing file only with ``--force``. Checked before any work."""
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise ValueError(f"-o {out}: no folder {folder}")
    if os.path.isdir(out):
        raise ValueError(f"-o {out} is a folder; -o names the file to write")
    if os.path.exists(out) and not force:
        raise ValueError(f"-o {out} exists; pass --force to replace it")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"-o {out}: cannot write in {folder} (permission denied)")
