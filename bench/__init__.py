"""Benchmarks of a source checkout; not part of the installed package (the wheel ships ``service`` alone).

- ``python -m bench`` (``make bench``): the service against its baselines, side by side, on the real broker
  (``command``, ``runner``, ``scenarios``, ``targets``, ``report``, ``baselines``, ``machine``);
- ``python -m bench.gpucheck``: the report of ``scripts/gpu-check.sh``;
- ``python -m bench.profile``: where each event's CPU goes in the service, stage by stage, sampled with py-spy
  at the drain and at light load (``profile``, ``stages``);
- scripts run by path: ``soak.py`` (``make soak``), ``compare_*.py``, ``trace_latency.py``.

The harness the bench runs its systems with is the product's (``service/tools/harness``):
``microbatch sweep --pipeline`` drains the service through it too.
"""
