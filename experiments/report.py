"""What every experiment records beside its figures: where its results go, the commit it ran
from, the machine and its load."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time

from streamjoin.runtime.result import machine_info
from streamjoin.runtime.sim.host_profile import profile_for_this_host
from streamjoin.runtime.sim.profile import MachineProfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
#: Environment variable naming another folder for the results (the gallery's quick runs and
#: the tests write there, so that they never overwrite the full results).
RESULTS_ENV = "STREAMJOIN_RESULTS"


def command_line() -> str:
    """How this script was run, as ``python experiments/<script> <args>`` (its path from the
    repository's root, whichever folder it ran from)."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), os.path.abspath(ROOT))
    return " ".join(["python", script, *sys.argv[1:]])


def results_dir() -> str:
    """The folder an experiment writes into: ``$STREAMJOIN_RESULTS``, else
    ``experiments/results``."""
    return os.environ.get(RESULTS_ENV) or os.path.join(os.path.dirname(__file__), "results")


def commit() -> str:
    """The checked-out commit (short hash), ``"unknown"`` outside a git checkout."""
    out = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def dirty() -> bool:
    """Whether tracked files differ from the commit (results written by the run aside)."""
    out = subprocess.run(
        [
            "git",
            "-C",
            ROOT,
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!experiments/results",
        ],
        capture_output=True,
        text=True,
    )
    return bool(out.stdout.strip())


def load() -> float:
    """The 1-minute load average (the 2 cores are shared with other jobs)."""
    return os.getloadavg()[0]


class Provenance:
    """Start a run's record: ``p = Provenance()`` at the start, ``p.line()`` in its markdown.

    The line names the machine, the load average at the start and at the end (and the range
    of any loads noted in between with :meth:`note`), the commit (and whether the working tree
    differed from it), the date, the command and how long it took.
    """

    def __init__(self) -> None:
        self.t0 = time.time()
        self.loads = [load()]
        # the code that runs is the code at the start: commits made during a long run do not
        # describe it
        self.commit, self.dirty = commit(), dirty()

    def note(self) -> float:
        """Record the load now (call it between measured runs); returns it."""
        self.loads.append(load())
        return self.loads[-1]

    def fields(self) -> dict:
        """The record as CSV-friendly fields."""
        m = machine_info()
        return {
            "commit": self.commit + ("+dirty" if self.dirty else ""),
            "cpus": m["cpus"],
            "platform": m["platform"],
            "load_start": round(self.loads[0], 2),
            "load_max": round(max(self.loads), 2),
        }

    def line(self) -> str:
        """One markdown line: machine, load, commit, date, command, duration."""
        end = self.note()
        m = machine_info()
        loads = self.loads
        between = f", {min(loads):.1f}–{max(loads):.1f} over the run" if len(loads) > 2 else ""
        tree = " plus uncommitted changes" if self.dirty else ""
        return (
            f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python "
            f"{m['python']}; load average {loads[0]:.1f} at the start, {end:.1f} at the end"
            f"{between} (other jobs share the cores); commit `{self.commit}`{tree}; "
            f"{time.strftime('%Y-%m-%d %H:%M')}; `{command_line()}`; "
            f"{(time.time() - self.t0) / 60:.1f} minutes."
        )


def host_profile() -> MachineProfile:
    """The profile every simulated machine of the gallery is built on: this host's, as
    ``streamjoin calibrate`` fitted it, else the shipped one (with a warning that names the
    command); ``STREAMJOIN_MACHINE_PROFILE`` chooses another."""
    return profile_for_this_host()


def cost_keys(profile: MachineProfile, index: str) -> list[str]:
    """The profile's cost keys of ``index``: its own and those of its topologies' cores
    (``nested_loop:handshake``, ``bisort:panjoin``, ...), which a fitted profile charges
    apart and a core of that kind takes before the index's own."""
    return [k for k in profile.indexes if k == index or k.startswith(index + ":")]


def scaled_scan(profile: MachineProfile, k: float, name: str | None = None) -> MachineProfile:
    """``profile`` with the nested loop's scan charged ``k`` times under each of its cost
    keys (:func:`cost_keys`: a chain's cores and PanJoin's workers too), as a window ``k``
    times the simulated one costs; named ``name`` if given."""
    d = profile.to_dict()
    for key in cost_keys(profile, "nested_loop"):
        d["indexes"][key] = {**d["indexes"][key], "scan": d["indexes"][key]["scan"] * k}
    if name is not None:
        d["name"] = name
    return MachineProfile.from_dict(d)


def profile_of(profile: MachineProfile) -> str:
    """A profile as a result records it: its name, where it came from (``shipped``, a file,
    this host's cache) and the day it was fitted."""
    return _described(profile.name, profile.source, profile.info)


def profile_note(metrics: dict) -> str:
    """Which machine profile a ``sim`` run used, from its metrics (as :func:`profile_of`)."""
    p = metrics["machine_profile"]
    return _described(p["name"], p["source"], p.get("info", {}))


def _described(name: str, source: str, info: dict) -> str:
    # (a path names a file outside the repository: its name only)
    source = source.split(" /")[0] if source.startswith("this host") else os.path.basename(source)
    return f"{name} ({source}, fitted {info.get('date', 'unknown')})"


def save_rows(rows: list[dict], path: str) -> None:
    """Write ``rows`` as CSV at ``path`` (folders made), columns in first-seen order."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)


def load_rows(path: str) -> list[dict]:
    """Rows of a CSV :func:`save_rows` wrote: numbers as floats, ``True``/``False`` as bools,
    the commit hash always as text."""

    def value(v: str):
        if v in ("True", "False"):
            return v == "True"
        try:
            return float(v)
        except ValueError:
            return v

    with open(path, newline="") as f:
        # a short commit hash can be all digits (or read as 1e5-like): never a number
        return [
            {k: v if k == "commit" else value(v) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def groups(rows: list[dict], *keys: str) -> dict:
    """``rows`` grouped by the values of ``keys``: ``{(v1, v2, ...): [row, ...]}``, in
    first-seen order."""
    out: dict = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def figure(data, path: str, panels, grid, size, font, legend_loc=None) -> None:
    """Draw ``panels`` (each ``panel(ax, data)``) on a ``grid`` of axes of ``size`` inches and
    save the PNG at ``path``; a panel with labelled lines gets a legend (at ``legend_loc``,
    a ``{panel: loc}`` dict, else where matplotlib finds room)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": font})
    fig, axes = plt.subplots(*grid, figsize=size, squeeze=False)
    for panel, ax in zip(panels, axes.ravel(), strict=True):
        panel(ax, data)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=font - 3, loc=(legend_loc or {}).get(panel, "best"))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
