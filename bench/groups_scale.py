"""``python -m bench.groups_scale``: two broker groups against one, on the same machine.

Two local clusters run side by side, in rounds (:mod:`bench.dev_clusters`):
``boltmq dev`` (one broker group) and ``boltmq dev --broker-groups 2`` (broker-a and
broker-b, each its own store and broker). The same workloads run on both:

- ``batched``: ``--count`` messages of ``--size`` bytes, batches of 256 from
  ``--threads`` threads of one Producer (the SDK spreads the batches over every
  group's queues once the topic exists on each);
- ``consume``: a fresh group reads what ``batched`` wrote, 1024 per pull.

Each result prints msg/s, MB/s and percentiles, then the two-group rate as a ratio of
the one-group rate in the same round. On a machine with few cores the extra group's
processes share the cores with the first group's and with the client, so the ratio
shows what a second group costs or gains on one host, not across hosts. These print
numbers; they assert nothing.
"""

from __future__ import annotations

import argparse

from bench.cluster import bench_consume, bench_produce
from bench.dev_clusters import DevCluster, run_rounds
from bench.report import BenchResult, format_result


def _round(
    cluster: DevCluster, round_no: int, count: int, size: int, threads: int
) -> dict[str, BenchResult]:
    topic = f"GroupsScale{round_no}"
    batched = bench_produce(cluster.registry, topic, count, size, 256, threads, cluster.sdk)
    results = {
        "batched": batched,
        "consume": bench_consume(cluster.registry, topic, batched.messages, size, cluster.sdk),
    }
    for workload, outcome in results.items():
        print(f"[{cluster.name}, round {round_no}] {workload}: {format_result(outcome)}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="messages, batched")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--threads", type=int, default=4, help="producer threads")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    for name in ("count", "size", "threads", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive")
    clusters = [DevCluster("1 group", ()), DevCluster("2 groups", ("--broker-groups", "2"))]
    run_rounds(
        clusters,
        args.rounds,
        lambda cluster, round_no: _round(cluster, round_no, args.count, args.size, args.threads),
    )


if __name__ == "__main__":
    main()
