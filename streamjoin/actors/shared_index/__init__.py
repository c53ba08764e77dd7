"""The shared-index join core (PIM-Tree §4): one core whose threads share its window indexes.

- :mod:`~streamjoin.actors.shared_index.core`: the core, its config and each step's
  orchestration;
- :mod:`~streamjoin.actors.shared_index.kernels`: the numba loop each thread runs over a step's
  tasks (task claiming, the edge tuple, result propagation);
- :mod:`~streamjoin.actors.shared_index.thread_pool`: the threads, waiting spinning between
  close steps.

The shared forms of the indexes are :mod:`streamjoin.indexes.pim.shared` and
:mod:`streamjoin.indexes.pim.pim_tree_shared`; the topology is
:func:`streamjoin.topologies.shared_index`.
"""
