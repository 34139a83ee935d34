"""microbatch: micro-batched ONNX Runtime inference over Kafka streams, at-least-once."""

__version__ = "0.1.0"
