"""``python -m bench.security_cost``: what mutual TLS and the ACL cost on the hot path.

Two local clusters run side by side: ``boltmq dev`` (plaintext, no ACL) and
``boltmq dev --tls --acl`` (mutual TLS on every call, component identities checked on
the internal ports, every broker call signed with an account and checked against the
ACL, replay cache on). The same workloads run on both, alternating which goes first in
each round so a drift of the shared machine touches both alike:

- ``batched``: ``--count`` messages of ``--size`` bytes, batches of 256, 2 threads;
- ``one at a time``: ``--single`` synchronous sends from one thread;
- ``consume``: a fresh group reads what ``batched`` wrote, 1024 per pull.

With ``--baseline CHECKOUT`` a third cluster runs in the rounds: plain ``boltmq dev``
started from another checkout of BoltMQ (an earlier revision, with its stubs generated),
so the plain figures of today are compared with the plain figures of that revision on
the same machine in the same minutes (whether the access gate, now always installed,
costs anything while TLS and the ACL are off). The client is this checkout's SDK.

Each result prints msg/s, MB/s and latency percentiles (per call), then one line per
workload and cluster with its rate as a ratio of the plain one in the same round. The
secured cluster's client uses the application certificate ``--tls`` issued and the
admin account ``--acl`` seeded. These print numbers; they assert nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.cluster import bench_consume, bench_produce
from bench.dev_clusters import DevCluster, run_rounds
from bench.report import BenchResult, format_result


def _round(
    cluster: DevCluster, round_no: int, count: int, single: int, size: int
) -> dict[str, BenchResult]:
    topic = f"SecurityCost{round_no}"
    sdk = cluster.sdk
    batched = bench_produce(cluster.registry, topic, count, size, 256, 2, sdk)
    results = {
        "batched": batched,
        "one at a time": bench_produce(cluster.registry, f"{topic}s", single, size, 1, 1, sdk),
        # what the batched sends stored (whole batches per thread), read back
        "consume": bench_consume(cluster.registry, topic, batched.messages, size, sdk),
    }
    for workload, outcome in results.items():
        print(f"[{cluster.name}, round {round_no}] {workload}: {format_result(outcome)}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000, help="messages, batched")
    parser.add_argument("--single", type=int, default=2_000, help="one-at-a-time sends")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline", type=Path, help="another BoltMQ checkout: its plain cluster runs too"
    )
    args = parser.parse_args(argv)
    for name in ("count", "single", "size", "rounds"):
        if getattr(args, name) < (0 if name == "size" else 1):
            parser.error(f"--{name} must be positive")
    clusters = [DevCluster("plain", ()), DevCluster("tls+acl", ("--tls", "--acl"))]
    if args.baseline is not None:
        if not (args.baseline / "boltmq" / "v1" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline}: not a checkout with generated stubs")
        clusters.append(DevCluster("plain@baseline", (), args.baseline.resolve()))
    run_rounds(
        clusters,
        args.rounds,
        lambda cluster, round_no: _round(cluster, round_no, args.count, args.single, args.size),
    )


if __name__ == "__main__":
    main()
