"""BoltMQ side by side with Redis Streams, NATS JetStream and RabbitMQ.

``python -m bench.compare`` (``make bench-compare``) starts each system on
loopback in a temporary directory, runs the same workload against it
(:mod:`bench.compare.workload`: 1 KiB bodies; 1 and 4 producers; batched and
one at a time; produce, consume, produce+consume; 1, 64 and 1,024 topics),
stops it, and then prints the table, replaces the "Side by side"
section of ``bench/RESULTS.md`` and draws ``bench/compare-*.png``.

Every system is driven from this one Python process with its usual Python
client (the BoltMQ SDK, redis-py with hiredis, nats-py, aio-pika), so each figure
includes that client's cost on the same cores as the servers. The durability
setting of each is stated in the results (:mod:`bench.compare.peer` and the
peer modules).
"""
