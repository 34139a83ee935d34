"""Tooling: everything that is not the run path. Nothing under ``service/`` outside this package imports it.

- commands: ``produce`` (load generator), ``verify`` (lost / duplicated / out of order), ``demo``,
  ``sweep/`` (throughput and latency per batch size);
- ``harness/``: a system under test on the real broker, fed generated events and measured (the sweep's
  drains; the bench of a source checkout, ``bench/``, runs on it too);
- ``generate/`` and ``poison``: generated events and malformed ones;
- shared by the tools and the tests: ``topics`` (create, delete, wait), ``reader`` (read a topic back),
  ``processes`` (start and stop a child process by PID).

The bench and the model build are developer tooling of a source checkout, not of this package: ``bench/``
(``make bench``) and ``modelbuild/`` (``make models``, torch) at the repository root.
"""
