"""The simulator's part of the ``streamjoin`` command: ``--backend sim`` options and
``streamjoin calibrate``. :mod:`streamjoin.cli` wires these in."""

from __future__ import annotations

import argparse
import os

from streamjoin.checks import cli_number
from streamjoin.cli_paths import FORCE_HELP, check_out_file
from streamjoin.runtime import BACKENDS


def add_sim_options(group) -> None:
    """``--machine``, ``--arrival`` and ``--cpus`` for the `run` and `compare` jobs
    (``--backend sim``)."""
    group.add_argument(
        "--machine",
        default=None,
        metavar="PROFILE_JSON",
        help="sim: machine profile from `streamjoin calibrate` (default: the shipped one)",
    )
    group.add_argument(
        "--arrival",
        choices=("replay", "constant", "poisson"),
        default=None,
        help="sim: input arrivals in virtual time: replay ts, or --pace tuples/s evenly or as "
        "a Poisson process (default: constant with --pace, else replay)",
    )
    group.add_argument(
        "--cpus",
        type=cli_number(integer=True, low=1),
        default=None,
        metavar="N",
        help="sim: processors the actors share, e.g. this host's to compare with --backend ray, "
        "with the profile's cpu_share (default: the profile's, normally one per actor)",
    )


def sim_run_kwargs(args) -> dict:
    """Keyword arguments of :func:`streamjoin.run` for the sim options in ``args``: the
    ``machine`` and ``arrival`` options of the backend that takes them."""
    if not _takes_sim_options(args.backend):
        if args.machine or args.arrival or args.cpus is not None:
            takers = " or ".join(b for b in BACKENDS if _takes_sim_options(b))
            raise ValueError(f"--machine, --arrival and --cpus need --backend {takers}")
        return {}
    from streamjoin.runtime.sim import Arrival, as_profile  # SimPy: only for a sim run

    if args.machine is not None and not os.path.isfile(args.machine):
        raise ValueError(
            f"--machine {args.machine}: no such file (write one with `streamjoin calibrate "
            f"-o {args.machine}`, or leave --machine out for the shipped profile)"
        )
    arrival = None
    if args.arrival == "replay":
        arrival = Arrival.replay()
    elif args.arrival is not None:
        if args.pace is None:
            raise ValueError(f"--arrival {args.arrival} needs --pace TUPLES_PER_S")
        arrival = (
            Arrival.constant(args.pace)
            if args.arrival == "constant"
            else Arrival.poisson(args.pace, seed=args.seed)
        )
    machine = args.machine
    if args.cpus is not None:
        machine = as_profile(machine).with_cpus(args.cpus)
    return {"machine": machine, "arrival": arrival}


def _takes_sim_options(backend: str) -> bool:
    return {"machine", "arrival"} <= set(BACKENDS.options(backend))


def add_calibrate_command(sub) -> None:
    """The ``calibrate`` subcommand."""
    from streamjoin import indexes

    cal = sub.add_parser(
        "calibrate",
        help="measure this machine's join kernels and messaging for --backend sim",
        description="Time the join kernels of every window index (per call, candidate, "
        "insert, pair, ...), steps after idle time, and the ray executor's messages between "
        "actors, fit the "
        "simulator's cost model and write a machine profile JSON for "
        "`--backend sim --machine FILE`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument("-o", "--out", default="machine.json", help="file (default: %(default)s)")
    cal.add_argument("--force", action="store_true", help=FORCE_HELP)
    cal.add_argument(
        "--index",
        action="append",
        choices=indexes.names(),
        metavar="NAME",
        help="measure only this index (repeatable; default: all)",
    )
    cal.add_argument("--quick", action="store_true", help="smaller workloads, coarser fit")
    cal.add_argument(
        "--no-ray",
        action="store_true",
        help="keep the shipped message costs instead of timing them on Ray",
    )
    cal.add_argument("--name", default=None, help="profile name (default: the host name)")
    cal.add_argument(
        "--idle-gap-ms",
        type=cli_number(low=0),
        default=None,
        metavar="MS",
        help="idle gap at which steps after idle time are timed (default: "
        "sim.IDLE_GAP_S; 0: keep the shipped after-idle costs)",
    )


def cmd_calibrate(args) -> int:
    from streamjoin.runtime.sim import IDLE_GAP_S, calibrate

    check_out_file(args.out, args.force)  # before three minutes of measuring
    print("calibrating (about 3 minutes; --quick for a rough profile in seconds) ...", flush=True)
    gap = IDLE_GAP_S if args.idle_gap_ms is None else args.idle_gap_ms / 1e3 or None
    profile = calibrate(
        args.out,
        indexes=args.index,
        ray=not args.no_ray,
        quick=args.quick,
        name=args.name,
        idle_gap_s=gap,
    )
    print(profile.summary())
    fit = profile.info["fit"]
    worst = max((q["median_rel_error"], k) for k, q in fit.items() if "median_rel_error" in q)
    print(f"fit: worst median relative error {worst[0]:.0%} ({worst[1]})")
    print(f"wrote {args.out}")
    print(f"(to predict --backend ray on this host: --machine {args.out} --cpus {os.cpu_count()})")
    return 0
