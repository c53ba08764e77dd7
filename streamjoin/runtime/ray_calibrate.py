"""Ray messaging costs for a machine profile (:func:`cost_model.calibrate`).

Kept apart so that only ``runtime/ray*`` modules import Ray (DESIGN §3).
"""

from __future__ import annotations

import time

import numpy as np
import ray

from streamjoin.runtime.cost_model import MessageCosts


@ray.remote
class _Sink:
    def take(self, payload) -> None:
        return None


def _median_ns(fn, repeat: int) -> float:
    times = np.empty(repeat)
    for i in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times[i] = time.perf_counter_ns() - t0
    return float(np.median(times))


def measure_messages(repeat: int = 200) -> tuple[MessageCosts, dict]:
    """Time Ray actor calls and turn them into :class:`MessageCosts`.

    - ``send_ns``, ``send_per_byte_ns``: the caller's time in ``.remote()`` (serialising and
      submitting), for a tiny payload and its growth with payload size;
    - ``hop_ns``: half a tiny round trip, less the caller's part;
    - ``hop_per_byte_ns``: growth of the round trip with payload size (only the request
      carries it), less the caller's part;
    - ``recv_ns``: time per call of a pipelined burst (the busier end's cost per message) less
      the caller's part — the receiver's handling, as far as it can be told apart.

    Starts Ray with 2 CPUs and no dashboard if it is not running, and stops it again then.
    """
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)  # fmt: skip
    try:
        sink = _Sink.remote()
        tiny = np.zeros(1)
        for _ in range(50):  # warm the connection and the worker
            ray.get(sink.take.remote(tiny))
        sizes = np.array([8, 8 * 1024, 64 * 1024, 512 * 1024])
        rtt, submit = [], []
        for nbytes in sizes:
            payload = np.zeros(nbytes // 8)
            rtt.append(_median_ns(lambda p=payload: ray.get(sink.take.remote(p)), repeat))
            refs = []
            submit.append(_median_ns(lambda p=payload, r=refs: r.append(sink.take.remote(p)),
                                     repeat))  # fmt: skip
            ray.get(refs)
        burst = 2 * repeat
        t0 = time.perf_counter_ns()
        ray.get([sink.take.remote(tiny) for _ in range(burst)])
        pipelined = (time.perf_counter_ns() - t0) / burst
        ray.kill(sink)
    finally:
        if started:
            ray.shutdown()
    rtt_slope = max(0.0, float(np.polyfit(sizes, rtt, 1)[0]))
    send_slope = max(0.0, float(np.polyfit(sizes, submit, 1)[0]))
    send = submit[0]
    costs = MessageCosts(
        send_ns=send,
        send_per_byte_ns=send_slope,
        hop_ns=max(0.0, rtt[0] / 2 - send),
        hop_per_byte_ns=max(0.0, rtt_slope - send_slope),
        recv_ns=max(0.0, pipelined - send),
    )
    raw = {"rtt_ns": dict(zip(map(int, sizes), rtt, strict=True)),
           "submit_ns": dict(zip(map(int, sizes), submit, strict=True)),
           "pipelined_ns_per_call": pipelined}  # fmt: skip
    return costs, raw
