"""The simulator's part of the ``streamjoin`` command: ``--backend sim`` options and
``streamjoin calibrate``. :mod:`streamjoin.cli` wires these in."""

from __future__ import annotations

import argparse
import os

from streamjoin.checks import cli_number
from streamjoin.cli_paths import check_out_file
from streamjoin.runtime import BACKENDS


def add_sim_options(group) -> None:
    """``--machine``, ``--arrival``, ``--cpus`` and ``--sharing`` for the `run` and `compare`
    jobs (``--backend sim``)."""
    group.add_argument(
        "--machine",
        default=None,
        metavar="PROFILE_JSON",
        help="sim: machine profile JSON from `streamjoin calibrate -o` (default: the one "
        "`streamjoin calibrate` stored for this host, else the shipped one)",
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
    group.add_argument(
        "--sharing",
        choices=("fcfs", "ps"),  # (MachineProfile.sharing: its module would load SimPy here)
        default=None,
        help="sim, with shared processors: fcfs (a step waits for a free processor and holds "
        "it to its end) or ps (processor sharing: every runnable step runs, at processors / "
        "runnable speed, as a host's scheduler time-slices) (default: the profile's, fcfs)",
    )


def sim_run_kwargs(args) -> dict:
    """Keyword arguments of :func:`streamjoin.run` for the sim options in ``args``: the
    ``machine`` and ``arrival`` options of the backend that takes them."""
    sharing = getattr(args, "sharing", None)
    if not _takes_sim_options(args.backend):
        if args.machine or args.arrival or args.cpus is not None or sharing is not None:
            takers = " or ".join(b for b in BACKENDS if _takes_sim_options(b))
            raise ValueError(f"--machine, --arrival, --cpus and --sharing need --backend {takers}")
        return {}
    from streamjoin.runtime.sim import Arrival, as_profile  # SimPy: only for a sim run

    if args.machine is not None and not os.path.isfile(args.machine):
        raise ValueError(
            f"--machine {args.machine}: no such file (write one with `streamjoin calibrate "
            f"-o {args.machine}`, or leave --machine out for this host's profile)"
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
    if args.cpus is not None or sharing is not None:
        profile = as_profile(machine)
        cpus = profile.cpus if args.cpus is None else args.cpus
        if cpus is None:
            raise ValueError(
                "--sharing needs --cpus N: with a processor per actor no step shares one"
            )
        machine = profile.with_cpus(cpus, sharing=sharing)
    return {"machine": machine, "arrival": arrival}


def _takes_sim_options(backend: str) -> bool:
    return {"machine", "arrival"} <= set(BACKENDS.options(backend))


def add_calibrate_command(sub) -> None:
    """The ``calibrate`` subcommand."""
    from streamjoin import indexes

    cal = sub.add_parser(
        "calibrate",
        help="fit the simulator's profile of this machine (about 3 minutes), check it on Ray",
        description="Time the join kernels of every window index (per call, candidate, "
        "insert, pair, ...), the shared-index core, SPO's stages, steps after idle time and "
        "the ray executor's messages between actors; fit the simulator's cost model and "
        "store the machine profile as this host's, which `--backend sim` then uses by "
        "default. A fit on a busy machine (load, stolen time, a busy process's share of a "
        "processor) is not stored unless --force. --check then runs a fixed set of layouts "
        "on Ray and on the simulator, alternating, and prints sim / ray.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument(
        "-o",
        "--out",
        default=None,
        help="also write the profile to this file (for --machine FILE on another host)",
    )
    cal.add_argument(
        "--force",
        action="store_true",
        help="store the profile even if the machine was busy, and replace the -o file",
    )
    cal.add_argument(
        "--index",
        action="append",
        choices=indexes.names(),
        metavar="NAME",
        help="measure only this index (repeatable; default: all). A partial profile is "
        "written to -o only, never stored as this host's",
    )
    cal.add_argument("--quick", action="store_true", help="smaller workloads, coarser fit")
    cal.add_argument(
        "--no-ray",
        action="store_true",
        help="keep the shipped message costs instead of timing them on Ray",
    )
    cal.add_argument(
        "--no-window-growth",
        action="store_true",
        help="skip measuring what a core's steps cost more on windows past the caches "
        "(2^16 to 2^20 tuples a stream, about 25 s); the simulator then charges a large "
        "window's steps as a small one's",
    )
    cal.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="time N indexes' kernels at once, each in a process of its own (default: one per "
        "processor; 1 for one at a time)",
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
    cal.add_argument(
        "--check",
        action="store_true",
        help="after fitting, run the check layouts on Ray and the simulator and print sim / "
        "ray, and the first layout again at the end: how far a layout moves from itself "
        "meanwhile (about 6 minutes more on a 2-core machine)",
    )
    cal.add_argument(
        "--check-only",
        action="store_true",
        help="fit nothing: check the profile a sim run would use now (this host's, else "
        "the shipped one; or --machine FILE)",
    )
    cal.add_argument(
        "--replay",
        default=None,
        metavar="ROWS_JSON",
        help="fit nothing and run nothing on Ray: simulate the layouts of a past check again "
        "(the rows --report saved beside its Markdown) on the profile in use now (or "
        "--machine FILE), against the Ray figures it recorded; for trying another profile "
        "or --sharing on the same Ray runs, in seconds",
    )
    cal.add_argument(
        "--machine",
        default=None,
        metavar="PROFILE_JSON",
        help="with --check-only or --replay: the profile to check",
    )
    cal.add_argument(
        "--sharing",
        choices=("fcfs", "ps"),  # (MachineProfile.sharing)
        default=None,
        help="with --check or --replay: how the simulated actors share the host's "
        "processors: fcfs (first come, first served) or ps (processor sharing) (default: "
        "the profile's, fcfs)",
    )
    cal.add_argument(
        "--report",
        default=None,
        metavar="FILE_MD",
        help="with --check or --replay: also write the table, the profile and the host as "
        "Markdown, and the rows as JSON beside it (FILE.json, for --replay)",
    )
    cal.add_argument(
        "--layout",
        action="append",
        default=None,
        metavar="NAME",
        help="with --check: only this layout (repeatable; default: all ten)",
    )
    cal.add_argument(
        "--tuples",
        type=cli_number(integer=True, low=1000),
        default=None,
        metavar="N",
        help="with --check: tuples of each unpaced run (default: 1,200,000, about a second "
        "on Ray; shorter runs carry their start-up)",
    )
    cal.add_argument(
        "--repeat",
        type=cli_number(integer=True, low=1),
        default=None,
        metavar="N",
        help="with --check: Ray runs of each layout in each mode, the median kept (default: "
        "3; on a shared host a paced run's latency varies from run to run)",
    )


def cmd_calibrate(args) -> int:
    from streamjoin.runtime.sim import IDLE_GAP_S, as_profile, calibrate, profile_for_this_host
    from streamjoin.runtime.sim.calibrate import BusyHostError
    from streamjoin.runtime.sim.fidelity import CHECK_LAYOUTS

    if args.layout:
        unknown = [n for n in args.layout if n not in CHECK_LAYOUTS]
        if unknown:
            raise ValueError(
                f"--layout {unknown[0]!r}: not a check layout; one of {list(CHECK_LAYOUTS)}"
            )
    if args.report is not None:
        check_out_file(args.report, force=True)  # a folder that exists, before the runs
    if args.machine is not None and not (args.check_only or args.replay):
        raise ValueError(
            "--machine goes with --check-only or --replay (a fit measures this machine)"
        )
    if args.sharing is not None and not (args.check or args.check_only or args.replay):
        raise ValueError("--sharing goes with --check, --check-only or --replay")
    if args.replay is not None:
        if args.check or args.check_only or args.tuples or args.repeat:
            raise ValueError(
                "--replay runs nothing on Ray: it goes without --check, --check-only, "
                "--tuples and --repeat"
            )
        return _replay(args)
    if args.check_only:
        profile = as_profile(args.machine) if args.machine else profile_for_this_host(warn=False)
        profile = _shared_as(profile, args.sharing)
        print(f"checking the profile {profile.name!r} ({profile.source})", flush=True)
        return _check(profile, args.layout, args.report, args.tuples, args.repeat)
    if args.out is not None:
        check_out_file(args.out, args.force)  # before three minutes of measuring
    print("calibrating (about 3 minutes; --quick for a rough profile in seconds) ...", flush=True)
    gap = IDLE_GAP_S if args.idle_gap_ms is None else args.idle_gap_ms / 1e3 or None
    try:
        profile = calibrate(
            args.out,
            indexes=args.index,
            ray=not args.no_ray,
            quick=args.quick,
            name=args.name,
            idle_gap_s=gap,
            force=args.force,
            window_growth=not args.no_window_growth,
            progress=lambda phase, seconds: print(f"  {phase}: {seconds:.0f} s", flush=True),
            jobs=args.jobs,
        )
    except BusyHostError as e:
        print(e.profile.summary())
        print(_conditions(e.profile.info["conditions"]))
        raise ValueError(f"{e} (--force)") from None
    print(profile.summary())
    fit = {k: q for k, q in profile.info["fit"].items() if "median_rel_error" in q}
    print("fit residuals, |fitted - measured| / measured per step:")
    for key, q in sorted(fit.items(), key=lambda kq: -kq[1]["median_rel_error"]):
        print(
            f"  {key:<26} median {q['median_rel_error']:4.0%}  p90 {q['p90_rel_error']:5.0%}"
            f"  ({q['steps']:,} steps)"
        )
    print(_conditions(profile.info["conditions"]))
    speeds = list(profile.info["fit"]["speed"]["by_index"].values())
    mid = profile.info["speed_probe_ns"]
    print(
        f"host speed: a fixed join took {min(speeds) / mid:.2f}–{max(speeds) / mid:.2f}× its "
        "median around each index's runs (each fitted at the median)"
    )
    if profile.source.startswith("this host"):
        print(f"stored as {profile.source}: --backend sim uses it from now on")
    else:
        print("not stored as this host's profile (only some indexes were measured)")
    if args.out is not None:
        print(f"wrote {args.out} (for another host: --backend sim --machine {args.out})")
    if not args.check:
        return 0
    profile = _shared_as(profile, args.sharing)
    return _check(profile, args.layout, args.report, args.tuples, args.repeat)


def _shared_as(profile, sharing: str | None):
    """``profile`` with its processors shared as ``sharing`` says (None: as it says)."""
    return profile if sharing is None else profile.with_cpus(profile.cpus, sharing=sharing)


def _replay(args) -> int:
    import time

    from streamjoin.runtime.sim import as_profile, profile_for_this_host
    from streamjoin.runtime.sim.fidelity import load_rows, replay, table

    rows, meta = load_rows(args.replay)
    if args.layout:
        rows = [r for r in rows if r.layout.removesuffix(", again") in args.layout]
        if not rows:
            raise ValueError(f"--replay {args.replay}: no row of --layout {args.layout}")
    profile = as_profile(args.machine) if args.machine else profile_for_this_host(warn=False)
    profile = _shared_as(profile, args.sharing)
    print(
        f"replaying the check of {meta.get('date', '?')} (profile {meta.get('profile')!r}, "
        f"{meta['cpus']} processors) on the profile {profile.name!r} ({profile.source})"
        f"{', processor sharing' if profile.sharing == 'ps' else ''}: Ray's figures as "
        "recorded, the simulator's again",
        flush=True,
    )
    t0 = time.perf_counter()
    new = replay(rows, profile, reference_ns=meta.get("reference_ns"), cpus=meta["cpus"])
    print(table(new))
    if args.report is not None:
        _write_report(args.report, new, profile, time.perf_counter() - t0, meta.get("date", "?"))
    return 0


def _write_report(report_md: str, rows, profile, seconds: float, replayed=None) -> None:
    """The Markdown report and, beside it, the rows as JSON (for ``--replay``)."""
    from streamjoin.runtime.sim.fidelity import markdown, save_rows

    with open(report_md, "w") as f:
        f.write(markdown(rows, profile, seconds, replayed))
    rows_json = os.path.splitext(report_md)[0] + ".json"
    save_rows(rows_json, rows, profile)
    print(f"wrote {report_md} and {rows_json}")


def _conditions(c: dict) -> str:
    load = "–".join(f"{v:.2f}" for v in c["load_1min_start_end"])
    steal = "unknown" if c["steal"] is None else f"{c['steal']:.1%}"
    busy = "; ".join(c["busy"]) if c["busy"] else "quiet"
    return (
        f"conditions: {c['seconds']:.0f} s, load {load}, stolen {steal}, a busy process's "
        f"share {c['cpu_share'][0]:.2f}: {busy}{' (stored anyway: --force)' if c['forced'] else ''}"
    )


def _check(profile, layouts, report_md: str | None, tuples: int | None, repeat: int | None) -> int:
    import os
    import time

    from streamjoin.runtime.sim.fidelity import CHECK_REPEAT, CHECK_TUPLES, check, table

    print(
        f"check: the layouts on Ray in rounds, then on the simulator ({os.cpu_count()} "
        "processors shared)"
    )

    def report(row) -> None:
        print(table([row]).splitlines()[1], flush=True)

    def progress(step: str) -> None:
        print(f"  Ray: {step}", flush=True)

    t0 = time.perf_counter()
    rows = check(
        profile,
        layouts=layouts,
        report=report,
        progress=progress,
        tuples=CHECK_TUPLES if tuples is None else tuples,
        repeat=CHECK_REPEAT if repeat is None else repeat,
    )
    print(table(rows))
    if report_md is not None:
        _write_report(report_md, rows, profile, time.perf_counter() - t0)
    return 0
