"""This host's machine profile: where ``streamjoin calibrate`` keeps it, how a ``sim`` run
finds it, and whether the host was quiet enough to measure.

A profile describes one machine: its coefficients hold for another only by chance (the
shipped profile's Ray messages cost 5–8× what they cost on the same VM a few weeks later).
So ``streamjoin calibrate`` stores what it fits in the user's cache directory, under a
*fingerprint* of the host: the processor model, the number of processors, and the versions
of Python, numba, Ray and streamjoin (a new version may change what a kernel does per unit).
:func:`profile_for_this_host` is what ``Sim()`` runs on when it is given no profile: the
cached profile of this fingerprint, or else the shipped one, with a warning that names the
command that fits one.

``STREAMJOIN_MACHINE_PROFILE`` overrides the lookup: ``shipped`` for the shipped profile
(without the warning: a test suite wants the same virtual times on every machine), or a path
to a profile JSON. ``STREAMJOIN_CACHE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/streamjoin``, else ``~/.cache/streamjoin``).

A fit on a busy host measures the other jobs as much as the kernels; :func:`busy_reasons`
says what made a calibration's conditions doubtful (load, stolen time, the share of a
processor a busy process got), and ``calibrate`` refuses to store such a fit unless forced.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import warnings
from importlib import metadata
from pathlib import Path

from streamjoin._version import __version__
from streamjoin.runtime.sim.profile import MachineProfile, default_profile

#: Environment variable: ``shipped`` or a profile JSON path, instead of this host's cache.
PROFILE_ENV = "STREAMJOIN_MACHINE_PROFILE"
#: Environment variable: the cache directory (profiles go to its ``profiles/`` folder).
CACHE_ENV = "STREAMJOIN_CACHE_DIR"

#: A calibration is *busy* if the 1-minute load average exceeded this many runnable tasks per
#: processor beyond the calibration's own one …
BUSY_LOAD_PER_CPU = 0.5
#: … or the hypervisor stole more than this share of the processors' time …
BUSY_STEAL = 0.05
#: … or one busy process got less than this share of a processor.
BUSY_SHARE = 0.85


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; else what :mod:`platform` says)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint() -> dict:
    """What a profile is fitted for: processor model and count, Python, numba, Ray and
    streamjoin versions."""
    return {
        "cpu": cpu_model(),
        "cpus": os.cpu_count() or 1,
        "python": platform.python_version(),
        "numba": _version("numba"),
        "ray": _version("ray"),
        "streamjoin": __version__,
    }


def fingerprint_key(fp: dict | None = None) -> str:
    """A short stable name for a fingerprint (16 hex digits of its SHA-256)."""
    text = json.dumps(fp or fingerprint(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Where calibrated profiles live: ``$STREAMJOIN_CACHE_DIR/profiles``, else
    ``$XDG_CACHE_HOME/streamjoin/profiles``, else ``~/.cache/streamjoin/profiles``."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        root = os.path.join(xdg, "streamjoin")
    return Path(root) / "profiles"


def cached_profile_path(fp: dict | None = None) -> Path:
    """The file this host's profile is stored in (whether or not it exists)."""
    return cache_dir() / f"{fingerprint_key(fp)}.json"


def store(profile: MachineProfile, fp: dict | None = None) -> Path:
    """Write ``profile`` as this host's (atomically: a reader never sees half a file);
    returns its path."""
    path = cached_profile_path(fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = dict(profile.info, fingerprint=fp or fingerprint())
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    MachineProfile.from_dict(dict(profile.to_dict(), info=info)).save(tmp)
    os.replace(tmp, path)
    return path


def _warn_shipped(reason: str) -> None:
    warnings.warn(
        f"{reason}; simulating with the shipped profile, fitted on another machine (its "
        "figures can be off by 2x here). Fit one for this machine in about 3 minutes: "
        f"`streamjoin calibrate` (or set {PROFILE_ENV}=shipped to silence this)",
        stacklevel=4,
    )


def profile_for_this_host(*, warn: bool = True) -> MachineProfile:
    """The profile a ``sim`` run uses when given none (module docstring), its ``source``
    saying which it is."""
    chosen = os.environ.get(PROFILE_ENV, "").strip()
    if chosen == "shipped":
        return default_profile()
    if chosen:
        return with_source(MachineProfile.load(chosen), f"file {chosen} ({PROFILE_ENV})")
    path = cached_profile_path()
    if path.is_file():
        try:
            return with_source(MachineProfile.load(path), f"this host's cache {path}")
        except (OSError, ValueError) as e:  # a damaged cache file is not worth a failed run
            if warn:
                _warn_shipped(f"this host's profile {path} is unreadable ({e})")
            return default_profile()
    if warn:
        _warn_shipped("no machine profile fitted on this host")
    return default_profile()


def with_source(profile: MachineProfile, source: str) -> MachineProfile:
    """``profile`` with its ``source`` set (what ``metrics["machine_profile"]`` reports)."""
    return dataclasses.replace(profile, source=source)


def as_profile(machine) -> MachineProfile:
    """``machine`` as a profile: a :class:`MachineProfile`, a path to its JSON, a dict, or None
    for :func:`profile_for_this_host` (this host's calibrated profile, else the shipped one
    with a warning)."""
    if machine is None:
        return profile_for_this_host()
    if isinstance(machine, MachineProfile):
        return machine
    if isinstance(machine, dict):
        return MachineProfile.from_dict(machine)
    if isinstance(machine, str | os.PathLike):
        return MachineProfile.load(machine)
    raise ValueError(
        f"machine must be a MachineProfile, a JSON path or a dict, got {type(machine).__name__}"
    )


def busy_reasons(load_1min: float, steal: float, share: float, cpus: int) -> list[str]:
    """Why a calibration's host was too busy to trust (empty: it was quiet): the 1-minute
    load average beyond ``BUSY_LOAD_PER_CPU`` per processor on top of the calibration's own
    process, stolen time beyond ``BUSY_STEAL``, or a busy process's share of a processor
    below ``BUSY_SHARE`` (NaN figures are unknown, not busy)."""
    reasons = []
    limit = 1 + BUSY_LOAD_PER_CPU * cpus
    if load_1min > limit:
        reasons.append(f"load average {load_1min:.2f} (quiet: at most {limit:g})")
    if steal == steal and steal > BUSY_STEAL:
        reasons.append(f"{steal:.0%} of processor time stolen by the hypervisor")
    if share == share and share < BUSY_SHARE:
        reasons.append(f"a busy process got {share:.0%} of a processor")
    return reasons
