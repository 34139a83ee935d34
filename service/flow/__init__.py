"""The pure flow: records in, batches through the model, outputs and commits out.

Nothing here imports confluent_kafka or onnxruntime: the clients, the engine and telemetry come in
through the Protocols of ``ports``. The loop is ``pipeline.Pipeline``; its parts, one job each:

- ``model``: the loaded model, one object, and the one batch path;
- ``decode`` (or ``assembly``, rows from agents' points): bytes -> items, or rejections for the
  dead-letter topic;
- ``batcher``: the batch window, cost cap and length bucketing;
- ``sizing``: the batch-size policy, the one owner of the batch size; ``backlog`` the lag it follows;
- ``inflight``, ``inference``: batches on the inference thread, finished in order, split on failure;
- ``encode``, ``outputs``: the result and dead-letter records, handed to the sink;
- ``offsets``, ``checkpoint``: commit watermarks and the acknowledgement path with its commit contract;
- ``backpressure``: pause while too much is unacknowledged;
- ``parts``: all of them, handed to the loop as one value.
"""
