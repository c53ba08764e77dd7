"""The memory roofline that index results are reported against (issue: compact index items)."""

import math

import numpy as np
import pytest

from streamjoin.roofline import (
    Roofline,
    copy_bandwidth,
    cpu_times,
    dependent_load_ns,
    random_cycle,
    steal_share,
    two_thread_speedup,
)


@pytest.mark.parametrize("n", [2, 3, 10, 1000])
def test_the_chase_is_one_cycle_through_every_line(n):
    cycle = random_cycle(n, seed=n)
    seen, at = [], 0
    for _ in range(n):
        seen.append(at)
        at = int(cycle[at])
    assert at == 0 and sorted(seen) == list(range(n)), "one cycle visiting every line once"


def test_small_measurements_are_positive_and_finite():
    bw, ns = copy_bandwidth(1 << 20, repeats=2), dependent_load_ns(1 << 20, loads=10_000)
    assert math.isfinite(bw) and bw > 0 and math.isfinite(ns) and ns > 0


def test_bound_is_the_lower_of_bandwidth_and_latency():
    roof = Roofline(bandwidth_gbs=10.0, latency_ns=100.0)
    assert roof.bound(bytes_per_tuple=1000) == pytest.approx(1e7)  # 10 GB/s / 1 KB
    assert roof.bound(misses_per_tuple=2) == pytest.approx(5e6)  # 1 / 200 ns
    assert roof.bound(1000, 2) == pytest.approx(5e6)
    assert roof.fraction(2.5e6, 1000, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="bytes_per_tuple or misses_per_tuple"):
        roof.bound()
    with pytest.raises(ValueError, match=">= 0"):
        roof.bound(-1.0)
    assert "10.0 GB/s" in str(roof) and "100 ns" in str(roof)


def test_a_chase_beyond_the_caches_is_slower_than_one_inside():
    """The chase measures misses: 64 MiB of lines cost more per load than 64 KiB."""
    inside = min(dependent_load_ns(64 << 10, loads=200_000) for _ in range(3))
    beyond = dependent_load_ns(64 << 20, loads=200_000)
    assert beyond > 3 * inside, (inside, beyond)
    assert np.isfinite(beyond)


@pytest.mark.parametrize("kind", ["chase", "arith"])
def test_the_two_thread_speedup_is_a_positive_ratio(kind):
    """Small runs only: what it measures depends on the machine and the moment."""
    ratio = two_thread_speedup(kind, nbytes=1 << 20, repeats=2, work=20_000)
    # 2.0 on two free cores; under a loaded test run the one-thread baseline can lose more to
    # the other workers than the two threads do, by any amount (3.07 and 10.06 seen in CI), so
    # no upper bound holds: what must hold is a finite positive ratio
    assert math.isfinite(ratio) and ratio > 0
    with pytest.raises(ValueError, match="'chase' or 'arith'"):
        two_thread_speedup("sleep")


def test_steal_share_is_a_share_of_the_ticks_between_two_readings():
    assert steal_share((10, 1000), (30, 1400)) == pytest.approx(0.05)
    assert math.isnan(steal_share(None, (1, 2))) and math.isnan(steal_share((5, 9), (5, 9)))
    now = cpu_times()
    if now is not None:  # Linux: ticks only grow, and steal is part of them
        later = cpu_times()
        assert 0 <= now[0] <= now[1] and later[1] >= now[1] and later[0] >= now[0]
