"""The pure flow: records in, batches through the model, outputs and commits out.

Nothing here imports confluent_kafka or onnxruntime: the clients, the engine and telemetry come in
through the Protocols of ``ports``. The loop is ``pipeline.Pipeline``; its parts, one job each:

- ``decode``: bytes -> item, or a rejection for the dead-letter topic;
- ``batcher``: the batch window, cost cap and length bucketing;
- ``sizing``: the adaptive batch size, ``backlog`` the lag it follows;
- ``inflight``, ``inference``: batches on the inference thread, finished in order, split on failure;
- ``encode``, ``outputs``: the result and dead-letter records, handed to the sink;
- ``offsets``, ``checkpoint``: commit watermarks and the commit contract;
- ``backpressure``: pause while too much is unacknowledged.
"""
