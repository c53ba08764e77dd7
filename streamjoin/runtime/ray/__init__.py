"""The ``ray`` backend: each topology node a Ray actor, batches over authenticated TCP edges.

The package, one concern per module (importing it imports neither Ray nor anything below):

- :mod:`~streamjoin.runtime.ray.executor`: the :class:`~streamjoin.runtime.ray.executor.Ray`
  executor, run in the driver (it starts Ray, places the actors, feeds the emitter);
- :mod:`~streamjoin.runtime.ray.host`: the actor that hosts one node's logic;
- :mod:`~streamjoin.runtime.ray.channels`: the TCP edges between actors, authenticated before
  anything is read;
- :mod:`~streamjoin.runtime.ray.wire`: the typed frames on them (nothing is unpickled);
- :mod:`~streamjoin.runtime.ray.recovery`: rebuilding a lost join core by replaying its
  window.
"""
