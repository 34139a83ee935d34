"""The Kafka edges: the only code of the run path that imports confluent_kafka.

``Source`` owns the consumer and ``Sink`` the producer; both satisfy the loop's ports
(``service.flow.ports.SourceLike`` and ``SinkLike``).
"""

from service.kafka.sink import Sink
from service.kafka.source import Source

__all__ = ["Sink", "Source"]
