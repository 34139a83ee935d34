"""Tooling: everything that is not the run path. Nothing under ``service/`` outside this package imports it.

- commands: ``produce`` (load generator), ``verify`` (lost / duplicated / out of order), ``demo``,
  ``bench/`` (the service against its baselines), ``sweep/`` (throughput and latency per batch size);
- ``modelbuild/``: torch definitions and training of the reference models (the ``models`` extra);
- ``generate/`` and ``poison``: generated events and malformed ones;
- shared by the tools and the tests: ``topics`` (create, delete, wait), ``reader`` (read a topic back),
  ``processes`` (start and stop a child process by PID).
"""
