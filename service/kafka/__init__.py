"""The Kafka edges: the only code of the run path that imports confluent_kafka.

``Source`` owns the consumer and ``Sink`` the producer; both satisfy the loop's ports
(``service.flow.ports.SourceLike`` and ``SinkLike``) and tell one ``ClientHooks`` what they see.
``RangeReader`` is the backfill's ``Source``.
"""

from service.kafka.hooks import NO_HOOKS, ClientHooks
from service.kafka.ranges import RangeReader
from service.kafka.sink import Sink
from service.kafka.source import Source

__all__ = ["NO_HOOKS", "ClientHooks", "RangeReader", "Sink", "Source"]
