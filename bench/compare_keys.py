"""What message keys cost row assembly: agents' messages keyed by host, or at random (collectd's default; a
null key, as Telegraf and the Collector send, is spread alike), over the partitions of a topic shared by
1, 2 or 4 replicas. Each replica assembles its own partitions' messages with the service's own format and
assembler, every row left open until its interval's messages are all in (no time limit: the best case).

Prints a markdown table: rows made per true (host, interval) row, the share of them scored (every required
feature present), the mean number of features filled per scored row, and the median relative error of the
scored rows' features against the generated truth. Pure: no broker, no model.

    .venv/bin/python bench/compare_keys.py [--hosts 8] [--intervals 60] [--partitions 4]
"""

from __future__ import annotations

import argparse
import random
import zlib

import numpy as np

from service.tools.generate import HOST_FEATURES, host_rows
from service.tools.generate.agents import render
from service.tools.rowcheck import replay

REQUIRED = HOST_FEATURES[:5]
AGENTS = {"collectd": "collectd-json", "influx": "influx"}  # rates sent by the agent; counters to rate here


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--intervals", type=int, default=60)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    interval_s = 10.0
    series = host_rows(5, hosts=args.hosts, interval_s=interval_s, count=args.intervals)
    truth = {
        (s.spec.name, round(t / interval_s)): row
        for s in series
        for t, row in zip(s.times, s.rows(), strict=True)
    }
    print("| agent | keys | replicas | rows per true row | scored | filled per scored row | median error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for agent, fmt in AGENTS.items():
        messages = [(s.spec.name, value) for s in series for value in render(s, agent)]
        for keys in ("host", "random"):
            rng = random.Random(1)
            partition = [
                zlib.crc32(host.encode()) % args.partitions
                if keys == "host"
                else rng.randrange(args.partitions)
                for host, _value in messages
            ]
            for replicas in (1, 2, 4):
                made, scored, filled, errors = 0, 0, [], []
                for replica in range(replicas):
                    mine = [m for m, p in zip(messages, partition, strict=True) if p % replicas == replica]
                    for row in replay(
                        enumerate(v for _h, v in mine), fmt, HOST_FEATURES, interval_s, REQUIRED
                    ):
                        made += 1
                        expected = truth.get((row.key, round(row.time / interval_s)))
                        if not row.scored or expected is None:
                            continue
                        scored += 1
                        filled.append(len(row.filled))
                        real = [f for f in HOST_FEATURES if f not in row.filled]
                        errors += [
                            abs(row.values[f] - expected[f]) / max(abs(expected[f]), 1e-9) for f in real
                        ]
                per_row, share = made / len(truth), scored / max(made, 1)
                print(
                    f"| {agent} | {keys} | {replicas} | {per_row:.2f} | {share:.2f} | "
                    f"{np.mean(filled) if filled else float('nan'):.2f} | "
                    f"{np.median(errors) if errors else float('nan'):.3f} |"
                )


if __name__ == "__main__":
    main()
