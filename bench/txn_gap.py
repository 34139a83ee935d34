"""What a Kafka transaction costs on this broker, one after another as the service commits them: the
commit itself, how long after the commit returns a read_committed reader sees the records, and what the
next transaction's first delivery pays (right after a commit the coordinator may answer the same id
with CONCURRENT_TRANSACTIONS until the markers are written, KAFKA-5477; librdkafka retries it).

    .venv/bin/python bench/txn_gap.py [--bootstrap 127.0.0.1:9092] [--transactions 300]

Prints the medians and 99th percentiles, in milliseconds, beside the first delivery inside an open
transaction (to a partition already in it) as the baseline.
"""

from __future__ import annotations

import argparse
import time
import uuid

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from service.tools.topics import TopicAdmin


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/txn_gap.py", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument(
        "--pause-ms", type=float, default=0.0, help="between a commit and the next transaction (0)"
    )
    args = parser.parse_args()
    topic = f"bench.txn-gap.{uuid.uuid4().hex[:8]}"
    admin = TopicAdmin({"bootstrap.servers": args.bootstrap})
    admin.create([topic], 1)
    name = f"txn-gap-{uuid.uuid4().hex}"
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": name, "linger.ms": 0})
    reader = Consumer({"bootstrap.servers": args.bootstrap, "group.id": name, "fetch.wait.max.ms": 10})
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    acked: list[float] = []

    def delivered(err: object, _msg: object) -> None:
        acked.append(time.perf_counter())

    try:
        producer.init_transactions(30)
        first: list[float] = []
        inside: list[float] = []
        commit: list[float] = []
        visible: list[float] = []
        for _ in range(args.transactions):
            time.sleep(args.pause_ms / 1000)
            producer.begin_transaction()
            for samples in (first, inside):  # the first record after a commit, then a second one
                acked.clear()
                sent = time.perf_counter()
                producer.produce(topic, b"x", on_delivery=delivered)
                while not acked:
                    producer.poll(0.0005)
                samples.append(acked[0] - sent)
            start = time.perf_counter()
            producer.commit_transaction(30)
            done = time.perf_counter()
            commit.append(done - start)
            seen = 0
            while seen < 2:
                seen += sum(1 for m in reader.consume(10, 0.0005) if m.error() is None)
            visible.append(time.perf_counter() - done)
        for name, values in (
            ("first delivery after a commit", first),
            ("a delivery inside the transaction", inside),
            ("commit_transaction", commit),
            ("from the commit's return until a reader sees it", visible),
        ):
            ms = np.asarray(values) * 1000
            slow = float(np.mean(ms > 5))
            print(
                f"{name}: median {np.median(ms):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms, "
                f"over 5 ms {slow:.0%}"
            )
    finally:
        reader.close()
        admin.delete([topic])


if __name__ == "__main__":
    main()
