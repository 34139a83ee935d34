"""The measuring harness: a system under test (the service, a backfill, a baseline) as its own process on
fresh topics of the real broker, fed generated events, and what comes out measured.

- ``runner``: one Kafka run of one system (a backlog drain, or events sent at a rate), and its figures;
- ``systems``: the system and the scenario (model, events, settings) it runs in;
- ``workload``: the generated events; ``kafka_io``: the topics, the input producer, the outputs read back;
- ``process``: a system's environment, its CPU and memory sampled; ``measure``: the figures, pure.

``microbatch sweep --pipeline`` drains the service through it at each batch size; the bench of a source
checkout (``bench/``, ``make bench``) compares the service with its baselines through it.
"""
