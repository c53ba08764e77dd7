"""The machine profile used when a ``sim`` run names none (:func:`cost_model.default_profile`).

Costs are ns per feature unit (``cost_model.FEATURES``), rounded to 4 digits, measured on the
development machine (a shared 2-core cloud VM). Recalibrate for your machine with
``streamjoin calibrate`` or :func:`streamjoin.runtime.cost_model.calibrate`.

- **Kernels** (roles and indexes): from ``streamjoin calibrate --name streamjoin-dev-2cpu``
  (commit aca5787) on 2026-11-26 at a load average of about 1.2, no other jobs running, every
  registered index (``info.fit``, ``info.date``). They were kept when the messages below
  were recalibrated: that run's kernel coefficients (load 1.4–1.7) predict
  ``experiments/sim_fidelity.py``'s unpaced throughput within 3% of these for ``single``,
  ``split(2)`` and ``grid(1, 2)``.
- **Emitter**: refitted when it gained the ``copied`` feature, from
  ``cost_model.calibrate(ray=False, idle_gap_s=None)`` on 2026-11-26 at a load average of
  1.2–1.5 (same workloads, every index). The old fit charged the copies of chunks merged into
  batches to every tuple sent (119 ns); now a tuple sent costs nothing more, a tuple copied
  129 ns.
- **Messages**: the ``ray`` executor's transport (batches as framed columns over one TCP
  connection per graph edge), timed through a relay actor where a join core stands
  (:func:`streamjoin.runtime.ray_calibrate.measure_messages`) by
  ``streamjoin calibrate -o /tmp/h6/machine.json --name streamjoin-dev-2cpu`` on 2026-11-26
  at a load average of 1.4–1.5 (``info.messages_calibrated``; raw figures in
  ``info.fit.messages``), in wall time. ``measured`` holds those raw send and receive costs
  at the four sizes (added later from the same figures; ``hop_ns`` recomputed against them,
  210.1 → 210.9 µs), which the simulator interpolates between. The profile before the executor moved off Ray actor
  calls had send 464 µs + 0.48 ns/B and receive 1631 µs + 2.04 ns/B.
- **After idle**: :func:`streamjoin.runtime.cost_model.measure_after_idle` (``bplus_tree``,
  window 16,384, 5 ms gaps and the ramp's 0.2 and 1 ms, 5 rounds) on 2026-11-26 at a load
  average of 1.3–0.9 (``info.fit.after_idle``): after 0.2 ms a step costs 24% of the 5 ms
  figure more, after 1 ms 45%. An earlier measurement at 5 ms only (load 1.0–1.4) gave 77,
  761, 289 and 42 µs; at loads of 2–3 it gave 79–95 µs (emitter), 560–610 µs (join core)
  and 45–49 µs (collector).

``cpus`` is None (a processor per actor); to predict ``ray`` on this 2-CPU host use
``default_profile().with_cpus(2, share)``: the driver and the actors share its processors,
and ``share`` (:func:`streamjoin.runtime.cost_model.measure_cpu_share`) says how much of
them the run gets beside the host's other work. ``cpu_share`` is empty here, as that is the
host's load of the moment rather than the machine: measured on 2026-11-26 at a load of
1.0–1.6 with one other job busy it was 0.97–0.99 for one busy process and 0.50–0.55 each for
two (Linux shares the processors between sessions first, so one busy job elsewhere holds
about one of the two). ``experiments/sim_fidelity.py`` measures it before each layout's runs
(results in ``experiments/results/sim_fidelity.md``).
"""

DEFAULT_PROFILE = {
    "name": "streamjoin-dev-2cpu",
    "cpu_scale": 1.0,
    "net_scale": 1.0,
    "cpus": None,
    "cpu_share": [],
    "roles": {
        "collector": {"calls": 7344.0, "pairs": 3.56},
        "emitter": {
            "calls": 8958.0,
            "tuples_in": 80.24,
            "msgs_out": 7561.0,
            "tuples_out": 0.0,
            "copied": 129.3,
        },
        "manager": {"calls": 83500.0, "tuples": 148.7, "msgs_out": 0.0, "pairs": 103.5},
    },
    "indexes": {
        "bisort": {
            "calls": 21440.0,
            "part_calls": 51690.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 12.46,
            "candidates": 0.0,
            "pairs": 27.67,
            "inserted": 167.1,
            "expired": 105.2,
        },
        "bplus_tree": {
            "calls": 95660.0,
            "part_calls": 16750.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 13.39,
            "candidates": 0.0,
            "pairs": 57.75,
            "inserted": 377.6,
            "expired": 296.1,
        },
        "chained": {
            "calls": 41170.0,
            "part_calls": 44870.0,
            "tuples": 0.0,
            "probes": 732.3,
            "scan": 9.553,
            "candidates": 8.796,
            "pairs": 33.71,
            "inserted": 0.0,
            "expired": 0.0,
        },
        "css_tree": {
            "calls": 55880.0,
            "part_calls": 18040.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 4.827,
            "candidates": 0.0,
            "pairs": 55.18,
            "inserted": 342.4,
            "expired": 102.9,
        },
        "hash": {
            "calls": 36550.0,
            "part_calls": 34450.0,
            "tuples": 0.0,
            "probes": 11.49,
            "scan": 0.0,
            "candidates": 14.72,
            "pairs": 19.36,
            "inserted": 93.29,
            "expired": 273.9,
        },
        "im_tree": {
            "calls": 54550.0,
            "part_calls": 35680.0,
            "tuples": 0.0,
            "probes": 212.7,
            "scan": 0.0,
            "candidates": 0.0,
            "pairs": 50.33,
            "inserted": 367.9,
            "expired": 100.5,
        },
        "nested_loop": {
            "calls": 55100.0,
            "part_calls": 18860.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 1.424,
            "candidates": 0.0,
            "pairs": 5.093,
            "inserted": 0.0,
            "expired": 694.8,
        },
        "pim_tree": {
            "calls": 42330.0,
            "part_calls": 39340.0,
            "tuples": 0.0,
            "probes": 157.3,
            "scan": 0.0,
            "candidates": 39.04,
            "pairs": 0.0,
            "inserted": 335.7,
            "expired": 113.4,
        },
        "rap_table": {
            "calls": 66130.0,
            "part_calls": 29970.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 52.77,
            "candidates": 0.0,
            "pairs": 44.48,
            "inserted": 204.2,
            "expired": 0.0,
        },
        "wib_tree": {
            "calls": 57650.0,
            "part_calls": 41880.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 39.15,
            "candidates": 0.0,
            "pairs": 26.39,
            "inserted": 472.4,
            "expired": 453.2,
        },
    },
    "messages": {
        "send_ns": 48150.0,
        "send_per_byte_ns": 0.2471,
        "hop_ns": 210900.0,
        "hop_per_byte_ns": 0.0,
        "recv_ns": 86730.0,
        "recv_per_byte_ns": 0.4606,
        "measured": [
            [65.0, 47640.0, 76460.0],
            [12560.0, 55720.0, 97380.0],
            [50192.0, 56420.0, 115780.0],
            [802832.0, 246700.0, 456100.0],
        ],
    },
    "after_idle": {
        "emitter_ns": 67962.0,
        "join_ns": 602370.75,
        "manager_ns": 277017.0,
        "collector_ns": 40994.25,
        "ramp": [
            [200000.0, 0.23742155089884054],
            [1000000.0, 0.4518670727020075],
            [5000000.0, 1.0],
        ],
    },
    "info": {
        "machine": {
            "platform": "Linux-6.18.44-fc-v595-x86_64-with-glibc2.36",
            "processor": "x86_64",
            "cpus": 2,
            "python": "3.11.7",
        },
        "date": "2026-11-26",
        "streamjoin": "0.1.0",
        "quick": False,
        "fit": {
            "collector": {"steps": 106054, "median_rel_error": 0.2548, "p90_rel_error": 0.5431},
            "emitter": {"steps": 199430, "median_rel_error": 0.2846, "p90_rel_error": 0.5755},
            "index:bisort": {"steps": 16718, "median_rel_error": 0.2519, "p90_rel_error": 0.4617},
            "index:bplus_tree": {
                "steps": 16718,
                "median_rel_error": 0.2759,
                "p90_rel_error": 0.4836,
            },
            "index:chained": {"steps": 16718, "median_rel_error": 0.1131, "p90_rel_error": 0.4541},
            "index:css_tree": {"steps": 16718, "median_rel_error": 0.1179, "p90_rel_error": 0.4894},
            "index:hash": {"steps": 16718, "median_rel_error": 0.2377, "p90_rel_error": 0.5312},
            "index:im_tree": {"steps": 16718, "median_rel_error": 0.21, "p90_rel_error": 0.4036},
            "index:nested_loop": {
                "steps": 16718,
                "median_rel_error": 0.1544,
                "p90_rel_error": 0.4657,
            },
            "index:pim_tree": {"steps": 16718, "median_rel_error": 0.2322, "p90_rel_error": 0.4421},
            "index:rap_table": {
                "steps": 16718,
                "median_rel_error": 0.3881,
                "p90_rel_error": 0.7487,
            },
            "index:wib_tree": {"steps": 16718, "median_rel_error": 0.2331, "p90_rel_error": 0.4534},
            "manager": {"steps": 34640, "median_rel_error": 0.2378, "p90_rel_error": 0.4218},
            "after_idle": {
                "gap_s": 0.005,
                "ramp_gaps_s": [0.0002, 0.001],
                "index": "bplus_tree",
                "window": 16384,
                "steps": {
                    "collector:panjoin:512": {
                        "hot_ns": 11306.0,
                        "after_idle_ns": 54291.5,
                        "after_gap_ns": {"0.2 ms": 18294.0, "1 ms": 25337.0, "5 ms": 54291.5},
                    },
                    "collector:single:4096": {
                        "hot_ns": 28493.0,
                        "after_idle_ns": 74399.5,
                        "after_gap_ns": {"0.2 ms": 42509.0, "1 ms": 50965.0, "5 ms": 74399.5},
                    },
                    "collector:single:512": {
                        "hot_ns": 25748.0,
                        "after_idle_ns": 54432.0,
                        "after_gap_ns": {"0.2 ms": 37770.0, "1 ms": 36187.0, "5 ms": 54432.0},
                    },
                    "collector:single:64": {
                        "hot_ns": 15915.0,
                        "after_idle_ns": 44614.0,
                        "after_gap_ns": {"0.2 ms": 19096.0, "1 ms": 26349.0, "5 ms": 44614.0},
                    },
                    "emitter:panjoin:512": {
                        "hot_ns": 41257.0,
                        "after_idle_ns": 119052.0,
                        "after_gap_ns": {"0.2 ms": 57247.0, "1 ms": 75201.0, "5 ms": 119052.0},
                    },
                    "emitter:single:4096": {
                        "hot_ns": 55163.0,
                        "after_idle_ns": 126156.0,
                        "after_gap_ns": {"0.2 ms": 82273.0, "1 ms": 92032.0, "5 ms": 126156.0},
                    },
                    "emitter:single:512": {
                        "hot_ns": 38662.0,
                        "after_idle_ns": 70481.0,
                        "after_gap_ns": {"0.2 ms": 50514.0, "1 ms": 58650.0, "5 ms": 70481.0},
                    },
                    "emitter:single:64": {
                        "hot_ns": 31278.0,
                        "after_idle_ns": 99035.0,
                        "after_gap_ns": {"0.2 ms": 33052.0, "1 ms": 44934.0, "5 ms": 99035.0},
                    },
                    "join:panjoin:512": {
                        "hot_ns": 574608.0,
                        "after_idle_ns": 1120162.0,
                        "after_gap_ns": {"0.2 ms": 746615.0, "1 ms": 804612.5, "5 ms": 1120162.0},
                    },
                    "join:single:4096": {
                        "hot_ns": 2821359.0,
                        "after_idle_ns": 4148819.0,
                        "after_gap_ns": {"0.2 ms": 3436269.0, "1 ms": 3802102.0, "5 ms": 4148819.0},
                    },
                    "join:single:512": {
                        "hot_ns": 1202185.5,
                        "after_idle_ns": 1559924.0,
                        "after_gap_ns": {"0.2 ms": 1480405.5, "1 ms": 1373726.0, "5 ms": 1559924.0},
                    },
                    "join:single:64": {
                        "hot_ns": 436015.0,
                        "after_idle_ns": 710427.0,
                        "after_gap_ns": {"0.2 ms": 433299.0, "1 ms": 514682.0, "5 ms": 710427.0},
                    },
                    "manager:panjoin:512": {
                        "hot_ns": 214571.0,
                        "after_idle_ns": 477582.0,
                        "after_gap_ns": {"0.2 ms": 254756.0, "1 ms": 375501.0, "5 ms": 477582.0},
                    },
                },
                "load_1min_start_end": [1.3, 0.88],
                "rounds": 5,
            },
            "messages": {
                "by_batch_size": {
                    "1": {
                        "bytes": 65,
                        "period_ns": 124100.0,
                        "send_ns": 47640.0,
                        "relay_cpu_ns": 96480.0,
                        "sink_cpu_ns": 59860.0,
                        "one_way_ns": 324000.0,
                        "idle_recv_ns": 134300.0,
                        "driver_send_ns": 184100.0,
                    },
                    "256": {
                        "bytes": 12560,
                        "period_ns": 153100.0,
                        "send_ns": 55720.0,
                        "relay_cpu_ns": 115500.0,
                        "sink_cpu_ns": 78150.0,
                        "one_way_ns": 375000.0,
                        "idle_recv_ns": 155000.0,
                        "driver_send_ns": 184400.0,
                    },
                    "1024": {
                        "bytes": 50192,
                        "period_ns": 172200.0,
                        "send_ns": 56420.0,
                        "relay_cpu_ns": 119500.0,
                        "sink_cpu_ns": 74150.0,
                        "one_way_ns": 403500.0,
                        "idle_recv_ns": 175200.0,
                        "driver_send_ns": 206300.0,
                    },
                    "16384": {
                        "bytes": 802832,
                        "period_ns": 702800.0,
                        "send_ns": 246700.0,
                        "relay_cpu_ns": 559900.0,
                        "sink_cpu_ns": 263700.0,
                        "one_way_ns": 537000.0,
                        "idle_recv_ns": 280900.0,
                        "driver_send_ns": 373500.0,
                    },
                },
                "load_1min": 1.38,
                "load_1min_start_end": [1.5, 1.38],
            },
        },
        "after_idle_calibrated": {
            "date": "2026-11-26",
            "command": "cost_model.measure_after_idle(rounds=5)",
            "load_1min_start_end": [1.3, 0.88],
        },
        "messages_calibrated": {
            "date": "2026-11-26",
            "command": "streamjoin calibrate -o /tmp/h6/machine.json --name streamjoin-dev-2cpu",
            "load_1min": 1.38,
        },
    },
}
