"""The machine profile used when a ``sim`` run names none (:func:`cost_model.default_profile`).

Measured by ``cost_model.calibrate(name="dev-2cpu")`` on the development machine (a shared
2-core cloud VM, 2026-11-25, while other jobs ran: its load average was about 5),
every registered index, Ray messaging included. Costs are ns per feature unit
(``cost_model.FEATURES``). Recalibrate for your machine with ``streamjoin calibrate`` or
:func:`streamjoin.runtime.cost_model.calibrate`.

The message costs come from calls of the driver to one idle Ray actor. A join core that
receives batches and sends pairs pays several times that per message on this host, and Ray's
actors share its 2 CPUs: to predict ``ray`` here, take receive costs measured through a relay
actor and ``with_cpus(2)`` (``experiments/sim_fidelity.py``, results in
``experiments/results/sim_fidelity.md``).
"""

DEFAULT_PROFILE = {
    "name": "streamjoin-dev-2cpu",
    "cpu_scale": 1.0,
    "net_scale": 1.0,
    "roles": {
        "collector": {"calls": 28590.0, "pairs": 12.75},
        "emitter": {"calls": 55990.0, "tuples_in": 67.61, "msgs_out": 24510.0, "tuples_out": 140.3},
        "manager": {"calls": 71150.0, "tuples": 249.9, "msgs_out": 0.0, "pairs": 105.5},
    },
    "indexes": {
        "bplus_tree": {
            "calls": 58250.0,
            "part_calls": 29310.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 3.518,
            "candidates": 0.0,
            "pairs": 106.6,
            "inserted": 804.0,
            "expired": 965.4,
        },
        "chained": {
            "calls": 1815.0,
            "part_calls": 77700.0,
            "tuples": 0.0,
            "probes": 714.2,
            "scan": 0.0,
            "candidates": 76.68,
            "pairs": 0.0,
            "inserted": 599.2,
            "expired": 0.0,
        },
        "css_tree": {
            "calls": 47980.0,
            "part_calls": 26280.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 3.147,
            "candidates": 0.0,
            "pairs": 92.47,
            "inserted": 448.9,
            "expired": 328.0,
        },
        "hash": {
            "calls": 54800.0,
            "part_calls": 25710.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 0.0,
            "candidates": 0.0,
            "pairs": 89.56,
            "inserted": 374.7,
            "expired": 309.9,
        },
        "im_tree": {
            "calls": 35740.0,
            "part_calls": 49040.0,
            "tuples": 0.0,
            "probes": 21.59,
            "scan": 1.821,
            "candidates": 118.2,
            "pairs": 0.0,
            "inserted": 823.4,
            "expired": 270.6,
        },
        "nested_loop": {
            "calls": 61920.0,
            "part_calls": 15850.0,
            "tuples": 0.0,
            "probes": 31.83,
            "scan": 1.715,
            "candidates": 0.0,
            "pairs": 70.14,
            "inserted": 539.6,
            "expired": 558.3,
        },
        "pim_tree": {
            "calls": 32590.0,
            "part_calls": 40120.0,
            "tuples": 0.0,
            "probes": 0.0,
            "scan": 7.709,
            "candidates": 0.0,
            "pairs": 82.26,
            "inserted": 644.9,
            "expired": 290.4,
        },
    },
    "messages": {
        "send_ns": 350600.0,
        "send_per_byte_ns": 1.922,
        "hop_ns": 893400.0,
        "hop_per_byte_ns": 0.0,
        "recv_ns": 277700.0,
    },
    "info": {
        "machine": {
            "platform": "Linux-6.18.44-fc-v595-x86_64-with-glibc2.36",
            "processor": "x86_64",
            "cpus": 2,
            "python": "3.11.7",
        },
        "date": "2026-11-25",
        "streamjoin": "0.1.0",
        "quick": False,
        "fit": {
            "collector": {"steps": 74989, "median_rel_error": 0.2274, "p90_rel_error": 0.5265},
            "emitter": {"steps": 139604, "median_rel_error": 0.1832, "p90_rel_error": 0.5129},
            "index:bplus_tree": {
                "steps": 16718,
                "median_rel_error": 0.1802,
                "p90_rel_error": 0.5358,
            },
            "index:chained": {"steps": 16721, "median_rel_error": 0.3009, "p90_rel_error": 0.819},
            "index:css_tree": {"steps": 16721, "median_rel_error": 0.1767, "p90_rel_error": 0.4277},
            "index:hash": {"steps": 16721, "median_rel_error": 0.2023, "p90_rel_error": 0.5129},
            "index:im_tree": {"steps": 16718, "median_rel_error": 0.2223, "p90_rel_error": 0.4294},
            "index:nested_loop": {
                "steps": 16718,
                "median_rel_error": 0.2084,
                "p90_rel_error": 0.5111,
            },
            "index:pim_tree": {"steps": 16724, "median_rel_error": 0.138, "p90_rel_error": 0.3882},
            "manager": {"steps": 24254, "median_rel_error": 0.2222, "p90_rel_error": 0.4488},
            "messages": {
                "rtt_ns": {
                    "8": 2488000.0,
                    "8192": 2484000.0,
                    "65536": 2920000.0,
                    "524288": 3536000.0,
                },
                "submit_ns": {
                    "8": 350600.0,
                    "8192": 231500.0,
                    "65536": 483900.0,
                    "524288": 1309000.0,
                },
                "pipelined_ns_per_call": 628300.0,
            },
        },
    },
}
