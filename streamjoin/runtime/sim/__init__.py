"""The ``sim`` backend: the real actor logic on simulated cores under a virtual clock, charged
by a calibrated machine profile (docs/design.md §3, "Executors").

``sj.run(query, data, topology, backend="sim", machine=..., arrival=...)``, or
``backend=Sim(machine=..., arrival=...)``. The package, one concern per module:

- :mod:`~streamjoin.runtime.sim.engine`: the SimPy engine and the :class:`Sim` executor;
- :mod:`~streamjoin.runtime.sim.arrival`: :class:`Arrival`, when input arrives;
- :mod:`~streamjoin.runtime.sim.trace`: :class:`SimTrace`, what a run records;
- :mod:`~streamjoin.runtime.sim.profile`: :class:`MachineProfile`, what steps and messages cost
  on one machine (the shipped one in ``default_profile.json``);
- :mod:`~streamjoin.runtime.sim.host_profile`: this host's calibrated profile (cached under a
  fingerprint of the host), the one a run uses when it names none;
- :mod:`~streamjoin.runtime.sim.costs`: :class:`CostModel`, charging each step from what it
  did;
- :mod:`~streamjoin.runtime.sim.variability`: :class:`Variability`, how much steps and
  messages vary from one to the next on the profile's machine (seeded draws);
- :mod:`~streamjoin.runtime.sim.capacity`: :func:`max_sustainable_rate`;
- :mod:`~streamjoin.runtime.sim.calibrate`: measuring this host into a profile
  (``streamjoin calibrate``; the indexes' kernels timed in worker processes of
  :mod:`~streamjoin.runtime.sim.calibrate_worker`), with the Ray message timing in
  :mod:`~streamjoin.runtime.sim.ray_messages` (the one module here that imports Ray, and only
  when calibration times messages), and what the fitted costs miss on windows past the caches
  in :mod:`~streamjoin.runtime.sim.window_growth`.
"""

from streamjoin.runtime.sim.arrival import Arrival
from streamjoin.runtime.sim.calibrate import (
    IDLE_GAP_S,
    RAMP_GAPS_S,
    calibrate,
    fit_costs,
    measure_after_idle,
    measure_cpu_share,
    nnls,
)
from streamjoin.runtime.sim.capacity import RateSearch, max_sustainable_rate
from streamjoin.runtime.sim.costs import CostModel
from streamjoin.runtime.sim.engine import Sim
from streamjoin.runtime.sim.host_profile import (
    as_profile,
    busy_reasons,
    cached_profile_path,
    fingerprint,
    profile_for_this_host,
)
from streamjoin.runtime.sim.profile import (
    FEATURES,
    IdleCosts,
    MachineProfile,
    MessageCosts,
    WindowCosts,
    default_profile,
    message_nbytes,
)
from streamjoin.runtime.sim.trace import SimStats, SimTrace
from streamjoin.runtime.sim.variability import Variability
from streamjoin.runtime.sim.window_growth import measure_window_growth

__all__ = [
    "FEATURES",
    "IDLE_GAP_S",
    "RAMP_GAPS_S",
    "Arrival",
    "CostModel",
    "IdleCosts",
    "MachineProfile",
    "MessageCosts",
    "RateSearch",
    "Sim",
    "SimStats",
    "SimTrace",
    "Variability",
    "WindowCosts",
    "as_profile",
    "busy_reasons",
    "cached_profile_path",
    "calibrate",
    "default_profile",
    "fingerprint",
    "fit_costs",
    "max_sustainable_rate",
    "measure_after_idle",
    "measure_cpu_share",
    "measure_window_growth",
    "message_nbytes",
    "nnls",
    "profile_for_this_host",
]
