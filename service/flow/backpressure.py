"""Back-pressure: stop fetching while too much is unacknowledged, so memory stays bounded.

This class is responsible for: pausing every assigned partition once ``limit`` consumed messages await
their acknowledgement (output slow or unavailable), resuming at half the limit, and keeping partitions
assigned meanwhile paused (or resumed, once it is over).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from service.flow.ports import SourceLike
from service.flow.records import TopicPartition

_log = structlog.get_logger("microbatch.backpressure")


class BackPressure:
    """Paused, the loop still calls ``consume`` (so the group keeps this member: no
    ``max.poll.interval.ms`` eviction) and polls the producer. Memory stays bounded by ``limit``
    messages (``MICROBATCH_INPUT__MAX_IN_FLIGHT``) plus the producer's queue."""

    def __init__(self, source: SourceLike, limit: int) -> None:
        self._source = source
        self._limit = limit
        self.paused = False

    def apply(self, in_flight: int) -> None:
        """Pause or resume for ``in_flight`` unacknowledged messages. Called every loop iteration."""
        if self.paused and in_flight <= self._limit // 2:
            self._source.resume()
            self.paused = False
            _log.info("consumer_resumed", in_flight=in_flight)
        elif self.paused or in_flight >= self._limit:
            # Re-applied every iteration while paused: partitions assigned meanwhile start unpaused.
            self._source.pause()
            if not self.paused:
                self.paused = True
                _log.warning("consumer_paused", in_flight=in_flight, limit=self._limit)

    def assigned(self, tps: Sequence[TopicPartition]) -> None:
        """Newly assigned partitions: resume them by name unless paused (then :meth:`apply` pauses them).
        librdkafka keeps a partition's paused flag across a revoke and a re-assignment, so a partition
        paused before a rebalance would otherwise stay paused."""
        if not self.paused:
            self._source.resume(list(tps))
